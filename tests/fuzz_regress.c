/*
 * Replays every input in tests/fuzz-corpus/ (the fuzzer's finds, kept as
 * regressions) and 300 pseudo-random inputs through the fuzz driver.
 */
#include "testutil.h"
#include "fuzz_ops.h"

#include <dirent.h>

int main(void)
{
	const char *dir = "tests/fuzz-corpus";
	DIR *d = opendir(dir);
	unsigned n = 0;
	static uint8_t buf[1 << 16];
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char path[512];
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			FILE *fp = fopen(path, "rb");
			CHECK(fp);
			size_t len = fread(buf, 1, sizeof(buf), fp);
			fclose(fp);
			fuzz_run(buf, len);
			n++;
		}
		closedir(d);
	}
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
