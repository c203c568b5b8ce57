/* Page index: insert, lookup, delete and tags against a brute-force
 * reference, including sparse and huge indices, and "next tagged at or
 * after i" for every tag.  An insert whose node allocation fails leaves
 * the index as it was: it left an empty root, the next insert grew over it
 * without its present bit, and pm_next (the truncate's walk) skipped what
 * was under it (pages that never went back: reclaim then asserted). */
#include "testutil.h"
#include "internal.h"

#define N 20000

static uint64_t keys[N];
static unsigned char present[N], tags[N];

static uint64_t ref_next(uint64_t start, int tag, int *which)
{
	uint64_t best = UINT64_MAX;
	*which = -1;
	for (int i = 0; i < N; i++) {
		if (!present[i] || keys[i] < start)
			continue;
		if (tag >= 0 && !(tags[i] & (1u << tag)))
			continue;
		if (keys[i] <= best) {
			best = keys[i];
			*which = i;
		}
	}
	return best;
}

/* One random operation on the entry @entry at @key of a map mirrored by
 * @pres and @tg: tag it (op 0, 1), untag it (2), delete or insert it (3). */
static void random_op(struct pagemap *pm, uint64_t key, void *entry, unsigned char *pres,
		      unsigned char *tg, int tag, unsigned op)
{
	switch (op) {
	case 0:
	case 1:
		if (*pres) {
			pm_tag_set(pm, key, tag);
			*tg |= 1u << tag;
		}
		break;
	case 2:
		pm_tag_clear(pm, key, tag);
		*tg &= ~(1u << tag);
		break;
	default:
		if (*pres) {
			CHECK(pm_delete(pm, key) == entry);
			*pres = *tg = 0;
		} else {
			CHECK_EQ(pm_insert(pm, key, entry), 0);
			*pres = 1;
		}
	}
}

/* The single entry at index 0 kept without a node, and its moves into
 * a tree and back: a few keys around the edges, random operations
 * against the same reference. */
static void small_maps(void)
{
	static const uint64_t small[4] = { 0, 1, 64, 5000 };
	struct pagemap pm;
	pm_init(&pm);
	static int e[4];
	CHECK_EQ(pm_insert(&pm, 0, &e[0]), 0);
	CHECK(pm.root == NULL && pm.count == 1);           /* no node */
	CHECK_EQ(pm_insert(&pm, 0, &e[0]), -EEXIST);
	pm_tag_set(&pm, 0, PM_TAG_DIRTY);
	CHECK(pm_any_tagged(&pm, PM_TAG_DIRTY) && !pm_any_tagged(&pm, PM_TAG_WRITEBACK));
	uint64_t at = 9;
	CHECK(pm_next(&pm, 0, PM_TAG_DIRTY, &at) == &e[0] && at == 0);
	CHECK(pm_next(&pm, 1, -1, &at) == NULL);
	CHECK_EQ(pm_insert(&pm, 64, &e[2]), 0);            /* into a tree */
	CHECK(pm.root != NULL);
	CHECK(pm_tag_get(&pm, 0, PM_TAG_DIRTY));           /* tag moved along */
	CHECK(!pm_tag_get(&pm, 64, PM_TAG_DIRTY));
	pm_check(&pm);
	CHECK(pm_delete(&pm, 0) == &e[0] && pm_delete(&pm, 64) == &e[2]);
	CHECK(pm.root == NULL && pm.count == 0);
	CHECK(pm_delete(&pm, 0) == NULL);

	unsigned char pres[4] = { 0 }, tg[4] = { 0 };
	uint64_t s = 7;
	for (int round = 0; round < 40000; round++) {
		int i = (int)(t_rand(&s) % 4);
		int tag = (int)(t_rand(&s) % PM_NR_TAGS);
		random_op(&pm, small[i], &e[i], &pres[i], &tg[i], tag, (unsigned)(t_rand(&s) % 4));
		pm_check(&pm);
		uint64_t count = 0;
		for (int k = 0; k < 4; k++) {
			count += pres[k];
			CHECK(pm_lookup(&pm, small[k]) == (pres[k] ? &e[k] : NULL));
			for (int t = 0; t < PM_NR_TAGS; t++)
				CHECK_EQ(pm_tag_get(&pm, small[k], t), !!(tg[k] & (1u << t)));
		}
		CHECK_EQ(pm.count, count);
		for (int t = -1; t < PM_NR_TAGS; t++) {
			uint64_t start = small[t_rand(&s) % 4] + (t_rand(&s) % 2);
			int want = -1;
			for (int k = 3; k >= 0; k--)
				if (pres[k] && small[k] >= start && (t < 0 || (tg[k] >> t & 1)))
					want = k;
			uint64_t got = 0;
			void *r = pm_next(&pm, start, t, &got);
			CHECK(r == (want < 0 ? NULL : (void *)&e[want]));
			if (want >= 0)
				CHECK_EQ(got, small[want]);
			if (t >= 0) {
				bool any = false;
				for (int k = 0; k < 4; k++)
					any |= pres[k] && (tg[k] >> t & 1);
				CHECK_EQ(pm_any_tagged(&pm, t), any);
			}
		}
	}
	pm_destroy(&pm);
	CHECK(pm.root == NULL && pm.single == NULL && pm.count == 0);
}

static void failed_inserts(void)
{
	static int e[4];
	for (unsigned nth = 1; nth <= 3; nth++) {
		struct pagemap pm;
		pm_init(&pm);
		CHECK_EQ(pm_insert(&pm, 0, &e[0]), 0);     /* one entry: no tree yet */
		pm_fail_alloc(nth);                         /* the tree for 4096 fails */
		int r = pm_insert(&pm, 4096, &e[1]);
		pm_fail_alloc(0);
		if (r) {
			CHECK_EQ(r, -ENOMEM);
			CHECK(!pm_lookup(&pm, 4096));
		}
		pm_check(&pm);
		/* a taller tree over what was left, then an entry under slot 0 */
		CHECK_EQ(pm_insert(&pm, 1ull << 18, &e[2]), 0);
		CHECK_EQ(pm_insert(&pm, 1, &e[3]), 0);
		pm_check(&pm);
		uint64_t at;
		CHECK(pm_next(&pm, 0, -1, &at) == &e[0] && at == 0);
		CHECK(pm_next(&pm, 1, -1, &at) == &e[3] && at == 1);
		/* every entry found by the walk and deleted: the map empties */
		unsigned found = 0;
		for (uint64_t i = 0; pm_next(&pm, i, -1, &at); i = at + 1) {
			CHECK(pm_delete(&pm, at));
			found++;
		}
		CHECK_EQ(found, r ? 3u : 4u);
		CHECK_EQ(pm.count, 0);
		pm_check(&pm);
		pm_destroy(&pm);
	}
	/* the first insert of an empty map, its second node failing */
	struct pagemap pm;
	pm_init(&pm);
	CHECK_EQ(pm_insert(&pm, 0, &e[0]), 0);
	CHECK(pm_delete(&pm, 0));
	pm_fail_alloc(2);
	int r = pm_insert(&pm, 1ull << 20, &e[1]);
	pm_fail_alloc(0);
	printf("  an insert whose second node fails: %d\n", r);
	pm_check(&pm);
	CHECK_EQ(pm_insert(&pm, 1ull << 30, &e[2]), 0);
	CHECK_EQ(pm_insert(&pm, 7, &e[3]), 0);
	uint64_t at;
	CHECK(pm_next(&pm, 0, -1, &at) == &e[3] && at == 7);
	pm_destroy(&pm);
	printf("  failed node allocations leave the index whole\n");
}

int main(void)
{
	small_maps();
	failed_inserts();
	struct pagemap pm;
	pm_init(&pm);
	/* a first entry beyond the first leaf, then one inside it */
	static int a, b;
	CHECK_EQ(pm_insert(&pm, 119, &a), 0);
	CHECK_EQ(pm_insert(&pm, 5, &b), 0);
	pm_check(&pm);
	uint64_t at;
	CHECK(pm_next(&pm, 0, -1, &at) == &b && at == 5);
	CHECK(pm_delete(&pm, 119) == &a && pm_delete(&pm, 5) == &b);
	CHECK(pm.root == NULL);
	uint64_t s = 42;
	/* distinct keys: dense runs, sparse keys and the extremes */
	for (int i = 0; i < N; i++) {
		uint64_t k;
		if (i < N / 2)
			k = (uint64_t)i;                          /* dense */
		else if (i < N - 2)
			k = (t_rand(&s) >> (t_rand(&s) % 64)) | (1ull << 20);
		else
			k = i == N - 2 ? UINT64_MAX : UINT64_MAX - 64;
		for (int j = 0; j < i; j++)
			if (keys[j] == k) { k = (uint64_t)i + (1ull << 40); break; }
		keys[i] = k;
	}
	/* entries are pointers to the key slots */
	for (int i = 0; i < N; i++) {
		CHECK_EQ(pm_insert(&pm, keys[i], &keys[i]), 0);
		present[i] = 1;
	}
	CHECK_EQ(pm.count, N);
	CHECK_EQ(pm_insert(&pm, keys[7], &keys[7]), -EEXIST);
	for (int i = 0; i < N; i++)
		CHECK(pm_lookup(&pm, keys[i]) == &keys[i]);
	CHECK(pm_lookup(&pm, (1ull << 40) - 3) == NULL || keys[0] == (1ull << 40) - 3);

	/* random tag / untag / delete / reinsert rounds */
	for (int round = 0; round < 60000; round++) {
		int i = (int)(t_rand(&s) % N);
		int tag = (int)(t_rand(&s) % PM_NR_TAGS);
		random_op(&pm, keys[i], &keys[i], &present[i], &tags[i], tag,
			  (unsigned)(t_rand(&s) % 4));
		if (round % 50 == 0) {
			if (round % 1000 == 0)
				pm_check(&pm);
			uint64_t start = round % 100 == 0 ? keys[t_rand(&s) % N] : t_rand(&s) >> (t_rand(&s) % 64);
			for (int t = -1; t < PM_NR_TAGS; t++) {
				int which;
				uint64_t want = ref_next(start, t, &which);
				uint64_t got = 0;
				void *e = pm_next(&pm, start, t, &got);
				if (which < 0) {
					CHECK(e == NULL);
				} else {
					CHECK(e == &keys[which]);
					CHECK(got == want);
				}
			}
			for (int k = 0; k < 20; k++) {
				int j = (int)(t_rand(&s) % N);
				for (int t = 0; t < PM_NR_TAGS; t++)
					CHECK_EQ(pm_tag_get(&pm, keys[j], t), !!(tags[j] & (1u << t)));
			}
		}
	}
	/* walk every tagged entry in order and count */
	for (int t = 0; t < PM_NR_TAGS; t++) {
		uint64_t idx = 0, n = 0, prev = 0;
		int want = 0;
		for (int i = 0; i < N; i++)
			want += present[i] && (tags[i] & (1u << t));
		while (pm_next(&pm, idx, t, &idx)) {
			CHECK(n == 0 || idx > prev);
			prev = idx;
			n++;
			if (idx == UINT64_MAX)
				break;
			idx++;
		}
		CHECK_EQ(n, want);
		CHECK_EQ(pm_any_tagged(&pm, t), want > 0);
	}
	/* delete everything: the tree frees itself */
	for (int i = 0; i < N; i++)
		if (present[i])
			CHECK(pm_delete(&pm, keys[i]) == &keys[i]);
	CHECK_EQ(pm.count, 0);
	CHECK(pm.root == NULL);
	pm_destroy(&pm);
	printf("pagemap: ok\n");
	return 0;
}
