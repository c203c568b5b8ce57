/*
 * Replays every input in tests/fuzz-corpus/ (the fuzzer's finds, kept as
 * regressions) and 300 pseudo-random inputs through the fuzz driver.
 */
#include "testutil.h"
#include "fuzz_ops.h"

#include <dirent.h>

int main(void)
{
	static uint8_t buf[1 << 16];
	unsigned n = t_replay_corpus("tests/fuzz-corpus", false, fuzz_run);
	uint64_t s = 777;
	for (int k = 0; k < 300; k++) {
		size_t len = (size_t)(t_rand(&s) % 2000);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)(t_rand(&s) >> 56);
		fuzz_run(buf, len);
	}
	printf("fuzz_regress: %u corpus inputs, 300 random inputs\n", n);
	return 0;
}
