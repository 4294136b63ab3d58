/* Why: the smallest C program that embeds flashjit through its C API. It
 * prints the library's version, opens a context (which works without a GPU:
 * kernels still compile to PTX), compiles a causal bf16 kernel and shows how
 * a refused spec reports its status. Exits 0 with or without a GPU. */
#include <flashjit/flashjit.h>

#include <stdio.h>
#include <string.h>

/* Prints the failed call's status and message; returns 1 for main. */
static int report(const char *what, flashjit_status_t status) {
  fprintf(stderr, "%s: %s: %s\n", what, flashjit_status_name(status),
          flashjit_last_error());
  return 1;
}

int main(void) {
  int32_t major, minor, patch, api;
  flashjit_get_version(&major, &minor, &patch, &api);
  printf("libflashjit %d.%d.%d, C API %d (header: %d)\n", major, minor, patch,
         api, FLASHJIT_C_API_VERSION);
  if (api < FLASHJIT_C_API_VERSION) {
    fprintf(stderr, "the library is older than flashjit.h\n");
    return 1;
  }

  /* Device 0, the default kernel cache, the device's chip (sm_90a when
   * there is no GPU). */
  flashjit_context_t ctx;
  flashjit_status_t status = flashjit_context_create(0, NULL, NULL, &ctx);
  if (status != FLASHJIT_STATUS_OK)
    return report("flashjit_context_create", status);
  const char *chip;
  int32_t has_device;
  const char *reason;
  flashjit_context_chip(ctx, &chip);
  flashjit_context_device(ctx, &has_device, &reason);
  if (has_device)
    printf("device 0: a GPU, kernels for %s\n", chip);
  else
    printf("no GPU (%s): compiling for %s only\n", reason, chip);

  flashjit_attention_spec_t spec;
  flashjit_attention_spec_init(&spec);
  spec.head_dim = 128;
  spec.causal = 1;
  spec.num_heads = 16;
  spec.num_kv_heads = 4;
  flashjit_kernel_t kernel;
  status = flashjit_kernel_compile(ctx, &spec, &kernel);
  if (status != FLASHJIT_STATUS_OK) {
    report("flashjit_kernel_compile", status);
    flashjit_context_destroy(ctx);
    return 1;
  }
  const char *name, *config;
  flashjit_kernel_describe(kernel, &name, &config);
  printf("compiled %s with tile config %s\n", name, config);
  if (has_device)
    printf("loaded on the GPU: flashjit_kernel_forward runs it on DLPack "
           "tensors\n");
  else
    printf("without a GPU, flashjit_kernel_forward returns \"%s\"\n",
           flashjit_status_name(FLASHJIT_STATUS_NO_DEVICE));
  flashjit_kernel_release(kernel);

  /* A spec no template handles is refused with a status, not a crash; the
   * message says why (one line per template here: the first is shown). */
  spec.head_dim = 48;
  status = flashjit_kernel_compile(ctx, &spec, &kernel);
  const char *message = flashjit_last_error();
  printf("head dim 48: %s (%.*s)\n", flashjit_status_name(status),
         (int)strcspn(message, "\n"), message);

  flashjit_context_destroy(ctx);
  return status == FLASHJIT_STATUS_UNSUPPORTED ? 0 : 1;
}
