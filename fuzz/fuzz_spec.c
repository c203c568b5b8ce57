/* libFuzzer target: `make fuzz` (clang).  See tests/fuzz_spec.h. */
#include "../tests/fuzz_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_spec_run(data, size);
	return 0;
}
