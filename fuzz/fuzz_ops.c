/* libFuzzer target: `make fuzz` (clang).  See tests/fuzz_ops.h. */
#include "../tests/fuzz_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_run(data, size);
	return 0;
}
