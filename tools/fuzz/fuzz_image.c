/* fuzz_image.c -- libFuzzer harness for JPEG and PNG decoding
 * (core/io/image.c, of_image_decode): the format comes from the
 * signature, so one harness reaches both decoders. */
#include "oneflow/oneflow.h"
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  of_tensor *t = NULL;
  if (of_image_decode(data, (int64_t)size, &t) == OF_OK) of_tensor_release(t);
  return 0;
}
