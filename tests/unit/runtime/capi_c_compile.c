/* capi_c_compile.c - flashjit.h used from C.
 * Why: the C API is for callers that are not C++. This file is compiled as
 * C99 with -pedantic-errors, so a C++-ism in the header (or in dlpack.h as
 * it includes it) fails the build; the function below walks the whole
 * handle life cycle from C and CApiTest.cpp checks its result. */
#include "flashjit/flashjit.h"

#include <stdio.h>
#include <string.h>

/* Creates a context, compiles a head-dim-64 kernel, reads its name and
 * releases everything. Returns the first status that is not OK (and copies
 * the last error into `message`), else FLASHJIT_STATUS_OK and the kernel
 * name in `message`. */
int flashjit_c_api_round_trip(char *message, size_t size) {
  flashjit_context_t ctx = NULL;
  flashjit_kernel_t kernel = NULL;
  flashjit_attention_spec_t spec;
  const char *name = NULL;
  flashjit_status_t status;

  message[0] = '\0';
  status = flashjit_context_create(0, "", NULL, &ctx);
  if (status != FLASHJIT_STATUS_OK)
    goto done;
  flashjit_attention_spec_init(&spec);
  spec.head_dim = 64;
  spec.causal = 1;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  status = flashjit_kernel_compile(ctx, &spec, &kernel);
  if (status != FLASHJIT_STATUS_OK)
    goto done;
  status = flashjit_kernel_describe(kernel, &name, NULL);
  if (status == FLASHJIT_STATUS_OK)
    snprintf(message, size, "%s", name);

done:
  if (status != FLASHJIT_STATUS_OK)
    snprintf(message, size, "%s", flashjit_last_error());
  flashjit_kernel_release(kernel);
  flashjit_context_destroy(ctx);
  return (int)status;
}
