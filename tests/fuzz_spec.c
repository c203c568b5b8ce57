/*
 * Replays every input in tests/fuzz-spec-corpus/ (the seeds of the
 * parsers' fuzz target and its finds, kept as regressions) and 300
 * pseudo-random inputs, mostly of the parsers' own words, through the
 * driver (tests/fuzz_spec.h).
 */
#include "testutil.h"
#include "fuzz_spec.h"

#include <dirent.h>

int main(void)
{
	static uint8_t buf[1 << 16];
	unsigned n = t_replay_corpus("tests/fuzz-spec-corpus", true, fuzz_spec_run);
	/* random texts of the parsers' words, digits and odd bytes */
	static const char *const words[] = {
		"mem", "model:", "stack:0/", "file:", "dir:", "nbd://", "rados:", "opener",
		",", "=", "/", "+", "@", ";", "%", ".", "-", "K", "M", "iB", "ms", "us", "s",
		"min_ratio=", "max_ratio=", "max_bytes=", "strict_limit=", "on_error=",
		"retry_timeout=", "chunk=", "throttle=", "max_inflight=", "qd=", "max_io=",
		"bw=", "lat=", "sched=", "err=", "stall=", "workers=", "stack_throttle=",
		"conns=", "window=fixed:", "timeout=", "backend=rados:", "rados_conf=",
		"object_size=", "mem=", "page_size=", "dirty_ratio=", "threads=",
		"99999999999999999999", "18446744073709551616", "0", "1", "100",
		"\xc3\xa9", "\xff",
	};
	const size_t nw = sizeof(words) / sizeof(words[0]);
	uint64_t s = 777;
	for (int k = 0; k < 300; k++) {
		size_t len = 0;
		buf[len++] = (uint8_t)"stdom"[k % 5];
		for (int w = (int)(t_rand(&s) % 12); w > 0; w--) {
			const char *word = words[t_rand(&s) % nw];
			size_t wl = strlen(word);
			memcpy(buf + len, word, wl);
			len += wl;
		}
		fuzz_spec_run(buf, len);
	}
	/* odd values get a message that names what is wrong (the mount's
	 * -o, m, and device specs, d); "" for a text that is accepted */
	static const char *const said[][3] = {
		{ "m", "dirty_ratio=+5", "bad value for dirty_ratio: '+5'" },
		{ "m", "dirty_ratio= 5", "bad value for dirty_ratio: ' 5'" },
		{ "m", "threads=+8", "bad value for threads: '+8'" },
		{ "m", "dirty_expire_centisecs=18446744073709551616",
		  "bad value for dirty_expire_centisecs" },
		{ "m", "dirty_ratio=5", "" },
		{ "m", "allow_other=1", "option 'allow_other' takes no value" },
		{ "m", "noatime=", "option 'noatime' takes no value" },
		{ "m", "mem=99999999999999999999", "bad size for mem: '99999999999999999999'" },
		{ "m", "mem=1E", "bad size for mem: '1E'" },
		{ "m", "mem=", "option 'mem' has no value" },
		{ "m", "entry_timeout=-1", "bad value for entry_timeout: '-1'" },
		{ "m", "\xc3\xa9", "unknown option '\xc3\xa9'" },
		{ "d", "mem,max_bytes=99999999999999999999",
		  "bad device tunable 'max_bytes=99999999999999999999'" },
		{ "d", "mem,max_bytes=18446744073709551616",
		  "bad device tunable 'max_bytes=18446744073709551616'" },
		{ "d", "mem,max_bytes=-1", "bad device tunable 'max_bytes=-1'" },
		{ "d", "mem,retry_timeout=", "bad device tunable 'retry_timeout='" },
		{ "d", "mem,max_bytes=1M junk", "bad device tunable 'max_bytes=1M junk'" },
		{ "d", "model:bw=1E", "bad model option 'bw=1E'" },
		{ "d", "model:bw=18446744073709551616", "bad model option 'bw=18446744073709551616'" },
		{ "d", "file:/x,qd=", "bad value for device option qd: '' (qd=1..4096)" },
		{ "d", "nbd://h/e,timeout=-1", "bad nbd option 'timeout=-1'" },
		{ "d", "rados:p,timeout=99999999999999999999", "bad rados option 'timeout=" },
		{ "d", "stack:99999999999999999999/x", "bad stacked device spec" },
	};
	int bad = 0;
	for (size_t i = 0; i < sizeof(said) / sizeof(said[0]); i++) {
		char dmsg[256] = "", *mmsg = NULL;
		const char *got = dmsg;
		if (said[i][0][0] == 'm')
			fs_mount(said[i][1], &mmsg);
		else
			fs_dev(said[i][1], false, dmsg);
		if (mmsg)
			got = mmsg;
		if (*said[i][2] ? !strstr(got, said[i][2]) : !!*got) {
			fprintf(stderr, "fuzz_spec: %s '%s' said '%s', not '%s'\n", said[i][0],
				said[i][1], got, said[i][2]);
			bad++;
		}
		free(mmsg);
	}
	if (bad)
		return 1;
	printf("fuzz_spec: %u corpus inputs, 300 random inputs\n", n);
	return 0;
}
