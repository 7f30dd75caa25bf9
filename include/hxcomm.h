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
 *  - Handles are checked: an hx_context or hx_endpoint that was finalized or closed, a second
 *    hx_close / hx_finalize, a handle of the other kind, or a pointer hxcomm never returned gives
 *    HX_ERR_HANDLE, never a crash. (A request handle that is unknown or already released gives
 *    HX_ERR_INVALID.)
 *  - Threads: every function may be called from any thread, on the same context too: each call
 *    takes the context's lock, so concurrent calls never corrupt it. What a blocking call
 *    (hx_write, hx_read, hx_wait, hx_waitall, hx_mprobe, hx_mread, hx_mdiscard) does with the
 *    lock depends on the context's thread level (hx_init_thread):
 *      HX_THREAD_SERIALIZED (hx_init's): it holds the lock until it returns, so the other
 *        threads' calls on that context wait for it. Fastest for one thread. With several
 *        threads, do not block in one on what another thread of this process must first send
 *        or receive (it would wait forever): use hx_iread / hx_iwrite + hx_test loops there.
 *      HX_THREAD_MULTIPLE: it gives the lock up between progress rounds (after a short spin it
 *        sleeps up to 1 ms at a time in poll() on hx_fd without it), so e.g. one thread can block
 *        in hx_read while another sends with hx_write on the same context and endpoint. Costs
 *        some latency over SERIALIZED.
 *    In both levels hx_barrier and hx_finalize hold the lock until they return. Closing an
 *    endpoint while another thread uses it makes that call fail (HX_ERR_HANDLE or
 *    HX_ERR_INVALID). Probe-then-read with wildcards is racy with several receiving threads
 *    (another thread may receive the probed message first): use the matched probe
 *    (hx_mprobe / hx_improbe, then hx_mread). hx_last_error() is per thread.
 *  - Contexts: a process joins a job of several ranks once: hx_init while a context in such a
 *    job is live gives HX_ERR_INVALID, and hx_init again after its hx_finalize is not supported
 *    (the launcher has already seen this rank). Without a launcher (a job of one), any number
 *    of contexts may coexist.
 *  - fork(): a child must not use a context it inherited (not even hx_finalize it): it would
 *    share the parent's sockets, shared memory and protocol state. It may exec (hxcomm's fds
 *    are close-on-exec) or _exit. hx_init in a forked child of a launched rank is not
 *    supported (it would join as its parent's rank).
 *  - Largest message: HX_MAX_MESSAGE bytes (16 x (2^32 - 1), about 64 GiB). Longer sends and
 *    receive capacities above it give HX_ERR_INVALID.
 *  - When hx_write blocks (and when an hx_iwrite completes): a message of up to HX_EAGER_LIMIT
 *    bytes (32 KiB by default) goes at once ("eager") while the sender holds fewer than
 *    HX_EAGER_CREDITS bytes (4 MiB by default) not yet received at that rank; it completes once
 *    handed to the rails, whether or not the receiver has posted a receive. A larger message, or
 *    one beyond the credits, goes by rendezvous: it completes only after the receiver has posted
 *    a matching receive and the data has arrived there, so hx_write blocks until then.
 *  - Truncation: a message longer than the receive buffer fills the buffer and the receive
 *    gives HX_ERR_TRUNCATED with the full length in its status. The sender is not told: its
 *    write completes with HX_OK.
 *  - Progress happens inside the calls (hx_test, hx_wait, hx_read, hx_write, hx_progress, ...).
 *  - Messages between two ranks are matched in the order they were sent.
 */
#ifndef HXCOMM_H
#define HXCOMM_H

#include <stddef.h>
#include <stdint.h>

/* ---- Version ---------------------------------------------------------------------------- */

#define HX_VERSION_MAJOR 0
#define HX_VERSION_MINOR 1
#define HX_VERSION_PATCH 0
/** The header's version as one number; compare with hx_version() (the library's). */
#define HX_VERSION_NUMBER ((HX_VERSION_MAJOR << 16) | (HX_VERSION_MINOR << 8) | HX_VERSION_PATCH)

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

/** A message taken out of matching by hx_mprobe / hx_improbe, to receive with hx_mread /
 *  hx_imread or drop with hx_mdiscard (one of them must follow, or the message stays held). */
typedef uint64_t hx_message;

/** An hx_message that holds no message. */
#define HX_MESSAGE_NULL ((hx_message)0)

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

/** The largest message in bytes: 16 x (2^32 - 1). */
#define HX_MAX_MESSAGE UINT64_C(68719476720)

/** Thread levels for hx_init_thread (see "Threads" above). */
#define HX_THREAD_SERIALIZED 0
#define HX_THREAD_MULTIPLE 1

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
    HX_ERR_PANIC = 9,     /**< internal error in hxcomm (a bug); only hx_finalize the context */
    HX_ERR_HANDLE = 10    /**< a context or endpoint handle that is not live: closed,
                               finalized, of the other kind, or never returned by hxcomm */
};

/* ---- Job ------------------------------------------------------------------------------- */

/** Joins the job described by the environment `hxcomm run` sets (HX_RANK, HX_SIZE, ...), or a
 *  PMI-1 launcher's (MPICH's mpiexec, Slurm's srun --mpi=pmi2: PMI_FD, PMI_RANK, PMI_SIZE, ...),
 *  setting up rails to every other rank. Without either, a job of one rank.
 *  On success *ctx is the new context; on failure it is set to NULL. */
int hx_init(hx_context **ctx);

/** As hx_init, with a thread level: HX_THREAD_SERIALIZED (what hx_init uses) or
 *  HX_THREAD_MULTIPLE (see "Threads" above). Another level gives HX_ERR_INVALID. */
int hx_init_thread(hx_context **ctx, int level);

/** The library's version, as HX_VERSION_NUMBER encodes it (major << 16 | minor << 8 | patch). */
uint32_t hx_version(void);

/** Completes outstanding sends, waits for every rank (a barrier), closes the rails in order and
 *  frees ctx. Under a PMI launcher a rank must call it before it exits: one that exits without it
 *  counts as failed, and Hydra then kills the ranks still running. Refused with HX_ERR_INVALID
 *  (nothing freed) while endpoints are open. After any other result ctx is freed: a later use
 *  of it gives HX_ERR_HANDLE.
 *  Pending operations: bytes already queued to a peer are written out first, so eager sends
 *  arrive; a rendezvous send whose receiver has not asked for the data may never be delivered,
 *  and receives still posted are dropped without completing. Their buffers are no longer
 *  touched once it returns, and every request handle of the context is gone: wait for your
 *  sends, and complete or hx_cancel your receives, before hx_finalize. */
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

/** Closes the endpoint and frees the handle (a later use gives HX_ERR_HANDLE). Receives still
 *  posted on it are not cancelled: complete or hx_cancel them first. */
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

/** Receives into `buf` (capacity `cap`, at most HX_MAX_MESSAGE) the first message for `ep` from
 *  `source` (a rank of the job, or HX_ANY_SOURCE) with `tag` (or HX_ANY_TAG). `status` may be
 *  NULL; it is also filled when the result is HX_ERR_TRUNCATED (then `buf` holds the message's
 *  first `cap` bytes). */
int hx_read(hx_endpoint *ep, uint32_t source, uint64_t tag, void *buf, size_t cap,
            hx_status *status);

/* ---- Nonblocking messaging ---------------------------------------------------------------- */

/** Starts a send; `buf` must stay valid and unmodified until the request completes. */
int hx_iwrite(hx_endpoint *ep, hx_target target, uint64_t tag, const void *buf, size_t len,
              hx_request *req);

/** Starts a receive (as hx_read); `buf` must stay valid and untouched until it completes. A
 *  capacity above HX_MAX_MESSAGE gives HX_ERR_INVALID. */
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
 *  allowed; a source outside the job gives HX_ERR_INVALID, as for hx_read) is waiting:
 *  *found = 1 and `status` (may be NULL) describes it, without receiving. */
int hx_probe(hx_endpoint *ep, uint32_t source, uint64_t tag, int *found, hx_status *status);

/** Matched probe, without blocking: as hx_probe, but a message found is also taken out of
 *  matching (no other receive or probe sees it) and *msg names it for hx_mread / hx_imread /
 *  hx_mdiscard. Not found: *found = 0 and *msg = HX_MESSAGE_NULL. */
int hx_improbe(hx_endpoint *ep, uint32_t source, uint64_t tag, int *found, hx_message *msg,
               hx_status *status);

/** Matched probe: waits for a message as hx_improbe would find it. */
int hx_mprobe(hx_endpoint *ep, uint32_t source, uint64_t tag, hx_message *msg,
              hx_status *status);

/** Receives the message *msg names (from a matched probe on an endpoint of the same context)
 *  into `buf`, as hx_read would; sets *msg = HX_MESSAGE_NULL. */
int hx_mread(hx_endpoint *ep, hx_message *msg, void *buf, size_t cap, hx_status *status);

/** Starts receiving the message *msg names (as hx_iread); sets *msg = HX_MESSAGE_NULL. */
int hx_imread(hx_endpoint *ep, hx_message *msg, void *buf, size_t cap, hx_request *req);

/** Drops the message *msg names (its bytes are received into nothing; waits for them) and sets
 *  *msg = HX_MESSAGE_NULL. */
int hx_mdiscard(hx_endpoint *ep, hx_message *msg);

/** Cancels a receive (hx_iread) that has not matched a message yet: *cancelled = 1 and the
 *  request is released (its buffer is no longer used; do not test or wait for it). Otherwise
 *  *cancelled = 0 (it has matched, it is a send, or the handle is unknown) and the request
 *  completes as usual. */
int hx_cancel(hx_context *ctx, hx_request req, int *cancelled);

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
