/* Every function of include/hxcomm.h, assigned to a pointer whose type is spelled out here by
 * hand (from the Rust definitions in crates/capi/src/lib.rs): compiled with -Werror against the
 * header (a declaration that differs is an incompatible-pointer error) and linked with -lhxcomm
 * (a function missing from libhxcomm.so is a link error). c_api.rs also checks that this list
 * names every function the header declares, and every hx_ symbol the library exports. */
#include <stdint.h>
#include <stdio.h>

#include "hxcomm.h"

#define FN(name, ret, args) ret(*const p_##name) args = name;

FN(hx_init, int, (hx_context **))
FN(hx_init_thread, int, (hx_context **, int))
FN(hx_version, uint32_t, (void))
FN(hx_finalize, int, (hx_context *))
FN(hx_rank, int, (const hx_context *, uint32_t *))
FN(hx_size, int, (const hx_context *, uint32_t *))
FN(hx_barrier, int, (hx_context *))
FN(hx_open, int, (hx_context *, uint16_t, hx_endpoint **))
FN(hx_close, int, (hx_endpoint *))
FN(hx_endpoint_id, int, (const hx_endpoint *, uint16_t *))
FN(hx_target_init, int, (const hx_endpoint *, uint32_t, uint16_t, hx_target *))
FN(hx_write, int, (hx_endpoint *, hx_target, uint64_t, const void *, size_t))
FN(hx_read, int, (hx_endpoint *, uint32_t, uint64_t, void *, size_t, hx_status *))
FN(hx_iwrite, int, (hx_endpoint *, hx_target, uint64_t, const void *, size_t, hx_request *))
FN(hx_iread, int, (hx_endpoint *, uint32_t, uint64_t, void *, size_t, hx_request *))
FN(hx_test, int, (hx_context *, hx_request, int *, hx_status *))
FN(hx_wait, int, (hx_context *, hx_request, hx_status *))
FN(hx_waitall, int, (hx_context *, size_t, const hx_request *, hx_status *))
FN(hx_probe, int, (hx_endpoint *, uint32_t, uint64_t, int *, hx_status *))
FN(hx_improbe, int, (hx_endpoint *, uint32_t, uint64_t, int *, hx_message *, hx_status *))
FN(hx_mprobe, int, (hx_endpoint *, uint32_t, uint64_t, hx_message *, hx_status *))
FN(hx_mread, int, (hx_endpoint *, hx_message *, void *, size_t, hx_status *))
FN(hx_imread, int, (hx_endpoint *, hx_message *, void *, size_t, hx_request *))
FN(hx_mdiscard, int, (hx_endpoint *, hx_message *))
FN(hx_cancel, int, (hx_context *, hx_request, int *))
FN(hx_progress, int, (hx_context *))
FN(hx_fd, int, (const hx_context *, int *))
FN(hx_endpoint_fd, int, (const hx_endpoint *, int *))
FN(hx_strerror, const char *, (int))
FN(hx_last_error, const char *, (void))

int main(void) {
    /* Call the two that need no context, through their pointers. */
    printf("symbols OK: %s, version %#x\n", p_hx_strerror(HX_OK), (unsigned)p_hx_version());
    return p_hx_last_error() == NULL;
}
