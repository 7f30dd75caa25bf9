/*
 * hxcomm.h — the native C API of hxcomm (libhxcomm.so).
 *
 * Multi-rail messaging between the ranks of a job started by `hxcomm run`, in the spirit of
 * DP-II: open a local endpoint, name a remote endpoint (a target: rank + endpoint id), write and
 * read tagged messages, blocking or nonblocking, and wait for them with poll()/epoll alongside
 * your other file descriptors.
 *
 *   hx_context *ctx; hx_endpoint *ep; hx_target peer;
 *   hx_init(&ctx);                        // from the launcher's environment; alone: 1 rank
 *   hx_open(ctx, 0, &ep);                 // local endpoint 0
 *   hx_target_init(ep, 1, 0, &peer);      // endpoint 0 of rank 1
 *   hx_write(ep, peer, 42, buf, len);     // blocking send, tag 42
 *   hx_read(ep, HX_ANY_SOURCE, HX_ANY_TAG, buf, cap, &status);
 *   hx_close(ep); hx_finalize(ctx);
 *
 * Build: cc -I include prog.c -L target/release -lhxcomm -Wl,-rpath,$PWD/target/release
 * Run:   hxcomm run -n 2 -- ./prog
 *
 * Conventions:
 *  - Every function returns an hx_result code: HX_OK (0) or an HX_ERR_* value. On failure,
 *    hx_last_error() gives a message with context (which call, peer, rail, endpoint...).
 *  - A NULL pointer argument (other than those documented as optional) gives HX_ERR_INVALID,
 *    never a crash. A NULL buffer is accepted only with length 0.
 *  - Thread safety: an hx_context and its endpoints are NOT thread-safe. Use them from one thread
 *    at a time (serialize calls yourself if several threads share them). hx_last_error() is
 *    per thread.
 *  - Progress happens inside the calls (hx_test, hx_wait, hx_read, hx_write, hx_progress, ...).
 *  - Messages between two ranks are matched in the order they were sent.
 */
#ifndef HXCOMM_H
#define HXCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Types ---------------------------------------------------------------------------- */

/** The engine of this process: one per process, created by hx_init, freed by hx_finalize. */
typedef struct hx_context hx_context;

/** A local endpoint, opened with hx_open and freed by hx_close. Borrows its context: close every
 *  endpoint before hx_finalize. */
typedef struct hx_endpoint hx_endpoint;

/** A remote endpoint (DP-II's target): endpoint `endpoint` of rank `rank`. A plain value; fill it
 *  with hx_target_init (which checks it) or directly. */
typedef struct hx_target {
    uint32_t rank;
    uint16_t endpoint;
} hx_target;

/** A nonblocking operation in flight. Released (and no longer valid) once hx_test reports it
 *  done, or hx_wait / hx_waitall return, whatever the result. */
typedef uint64_t hx_request;

/** What a completed receive got. */
typedef struct hx_status {
    uint32_t source;       /**< sending rank */
    uint16_t src_endpoint; /**< sending endpoint */
    uint64_t tag;          /**< the message's tag */
    size_t length;         /**< length of the message as sent */
    int truncated;         /**< nonzero: longer than the buffer, only the buffer's length stored */
} hx_status;

/** Receive from any rank (as `source`). */
#define HX_ANY_SOURCE UINT32_MAX
/** Receive with any tag (as `tag`). Reserved: sending with this tag gives HX_ERR_INVALID. */
#define HX_ANY_TAG UINT64_MAX

/** Result codes. */
enum hx_result {
    HX_OK = 0,            /**< success */
    HX_ERR_INVALID = 1,   /**< caller error: NULL pointer, bad rank/endpoint, unknown request,
                               reserved tag or endpoint id */
    HX_ERR_TRUNCATED = 2, /**< message longer than the receive buffer (status is filled) */
    HX_ERR_PEER = 3,      /**< the peer rank failed; operations involving it fail */
    HX_ERR_IO = 4,        /**< a system call failed */
    HX_ERR_CONFIG = 5,    /**< a setting (HX_* environment variable) is malformed */
    HX_ERR_SETUP = 6,     /**< rails could not be set up */
    HX_ERR_BOOTSTRAP = 7, /**< the launcher's bootstrap service failed */
    HX_ERR_PROTOCOL = 8,  /**< a peer broke the protocol (malformed or unexpected frame) */
    HX_ERR_PANIC = 9      /**< internal error in hxcomm (a bug); only hx_finalize the context */
};

/* ---- Job ------------------------------------------------------------------------------- */

/** Joins the job described by the environment `hxcomm run` sets (HX_RANK, HX_SIZE, ...), or a
 *  PMI-1 launcher's (MPICH's mpiexec, Slurm's srun --mpi=pmi2: PMI_FD, PMI_RANK, PMI_SIZE, ...),
 *  setting up rails to every other rank. Without either, a job of one rank.
 *  On success *ctx is the new context; on failure it is set to NULL. */
int hx_init(hx_context **ctx);

/** Completes outstanding sends, waits for every rank (a barrier), closes the rails in order and
 *  frees ctx. Under a PMI launcher a rank must call it before it exits: one that exits without it
 *  counts as failed, and Hydra then kills the ranks still running. Refused with HX_ERR_INVALID (nothing freed) while endpoints are open. After any
 *  other result ctx is freed and must not be used. */
int hx_finalize(hx_context *ctx);

/** This process's rank, 0..size-1. */
int hx_rank(const hx_context *ctx, uint32_t *rank);

/** The number of ranks in the job. */
int hx_size(const hx_context *ctx, uint32_t *size);

/** Waits until every rank of the job has entered the barrier. */
int hx_barrier(hx_context *ctx);

/* ---- Endpoints and targets -------------------------------------------------------------- */

/** Opens local endpoint `id` (chosen by the program, like a port; 0..65534, 65535 is reserved).
 *  HX_ERR_INVALID if it is already open. */
int hx_open(hx_context *ctx, uint16_t id, hx_endpoint **ep);

/** Closes the endpoint and frees the handle. Receives still posted on it are not cancelled:
 *  complete them first. */
int hx_close(hx_endpoint *ep);

/** The id the endpoint was opened with. */
int hx_endpoint_id(const hx_endpoint *ep, uint16_t *id);

/** Names endpoint `endpoint` of `rank` as a destination for writes from `ep`. HX_ERR_INVALID if
 *  the rank is not in the job or the endpoint id is reserved. (Whether the remote endpoint is
 *  open is not checked: messages wait at the receiver until it reads them.) */
int hx_target_init(const hx_endpoint *ep, uint32_t rank, uint16_t endpoint, hx_target *target);

/* ---- Blocking messaging ----------------------------------------------------------------- */

/** Sends `len` bytes at `buf` with `tag` to `target`; returns when `buf` may be reused. */
int hx_write(hx_endpoint *ep, hx_target target, uint64_t tag, const void *buf, size_t len);

/** Receives into `buf` (capacity `cap`) the first message for `ep` from `source` (or
 *  HX_ANY_SOURCE) with `tag` (or HX_ANY_TAG). `status` may be NULL; it is also filled when the
 *  result is HX_ERR_TRUNCATED (then `buf` holds the message's first `cap` bytes). */
int hx_read(hx_endpoint *ep, uint32_t source, uint64_t tag, void *buf, size_t cap,
            hx_status *status);

/* ---- Nonblocking messaging ---------------------------------------------------------------- */

/** Starts a send; `buf` must stay valid and unmodified until the request completes. */
int hx_iwrite(hx_endpoint *ep, hx_target target, uint64_t tag, const void *buf, size_t len,
              hx_request *req);

/** Starts a receive (as hx_read); `buf` must stay valid and untouched until it completes. */
int hx_iread(hx_endpoint *ep, uint32_t source, uint64_t tag, void *buf, size_t cap,
             hx_request *req);

/** Makes progress without blocking. *done = 0: still in flight. *done = 1: finished and released;
 *  the result is the request's (HX_OK, HX_ERR_TRUNCATED, HX_ERR_PEER, ...) and `status` (may be
 *  NULL) is filled for a receive. An unknown handle gives HX_ERR_INVALID (with *done = 1). */
int hx_test(hx_context *ctx, hx_request req, int *done, hx_status *status);

/** Waits until the request completes and releases it; `status` may be NULL. */
int hx_wait(hx_context *ctx, hx_request req, hx_status *status);

/** Waits until all `n` requests complete and releases them. On HX_OK, `statuses` (NULL, or room
 *  for `n`) is filled in order; otherwise the first error is returned once all are done. */
int hx_waitall(hx_context *ctx, size_t n, const hx_request *reqs, hx_status *statuses);

/** Makes progress, then tells whether a message for `ep` matching `source` / `tag` (wildcards
 *  allowed) is waiting: *found = 1 and `status` (may be NULL) describes it, without receiving. */
int hx_probe(hx_endpoint *ep, uint32_t source, uint64_t tag, int *found, hx_status *status);

/* ---- Progress and polling --------------------------------------------------------------- */

/** Handles whatever is ready (incoming bytes, room to send) without blocking. */
int hx_progress(hx_context *ctx);

/** A file descriptor that becomes readable when the engine has work to do. Put it in your
 *  poll()/select()/epoll set with your other fds; when it is readable, call hx_test / hx_progress
 *  (which handle the work). Typical loop: post hx_iread; while hx_test says not done, poll() the
 *  fd with your others. Do not read from or close it; it is valid until hx_finalize. */
int hx_fd(const hx_context *ctx, int *fd);

/** The pollable fd for an endpoint: the context's fd (shared by all its endpoints). */
int hx_endpoint_fd(const hx_endpoint *ep, int *fd);

/* ---- Errors ------------------------------------------------------------------------------ */

/** A static, human-readable name for a result code. Never NULL. */
const char *hx_strerror(int code);

/** The message of the last failed hxcomm call on this thread, with context, or "" if none.
 *  Valid until the next failing hxcomm call on this thread. Never NULL. */
const char *hx_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HXCOMM_H */
