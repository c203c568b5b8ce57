/*
 * Writing one file (layer writeback; write_inode_pages, the kernel's
 * write_cache_pages): find the next page with tag T (DIRTY, or TOWRITE for
 * sync) at or after the resume point, take it and its contiguous tagged
 * neighbours up to the backend's max I/O, move them DIRTY -> WRITEBACK
 * under the inode lock, drop the lock, submit one vectored I/O.  At most
 * qd I/Os are in flight per device (a pool of qd bios).  Sync first tags
 * every DIRTY page in range TOWRITE, and then writes only TOWRITE pages:
 * pages dirtied after the tag walk wait for the next sync, so a busy
 * writer cannot livelock fsync.  The page states and who changes them:
 * mm/page.h.
 */
#include "writeback/writeback.h"

#include <limits.h>

/* ------------------------------------------------------------------ */
/* writing one inode                                                    */

/* Tag every DIRTY page in [start, end] TOWRITE (the sync snapshot). */
static void tag_pages_locked(struct inode *ino, uint64_t start, uint64_t end)
{
	assert_held(&ino->lock);
	uint64_t idx = start;
	while (idx <= end && pm_next(&ino->map, idx, PM_TAG_DIRTY, &idx) && idx <= end) {
		pm_tag_set(&ino->map, idx, PM_TAG_TOWRITE);
		if (idx == UINT64_MAX)
			break;
		idx++;
	}
}

/* Wait for the pages of [start, end] under writeback now, each in turn
 * (as the kernel's __filemap_fdatawait_range): the search moves past a
 * page once it is no longer under writeback, so writeback that others
 * start meanwhile behind it (the flusher's, of pages written again) does
 * not hold the wait up for as long as writers keep going. */
void wait_on_writeback_range(struct inode *ino, uint64_t start, uint64_t end)
{
	uint64_t idx, from = start;
	pthread_mutex_lock(&ino->lock);
	while (pm_next(&ino->map, from, PM_TAG_WRITEBACK, &idx) && idx <= end) {
		from = idx;
		inode_wait_locked(ino);
		uint64_t again;
		if (!pm_next(&ino->map, idx, PM_TAG_WRITEBACK, &again) || again != idx) {
			if (idx == UINT64_MAX)
				break;
			from = idx + 1;   /* that page is done: on to the next */
		}
	}
	pthread_mutex_unlock(&ino->lock);
}

/* Add page @p to @b, merging with the previous iovec when the two pages
 * are neighbours in the arena. */
static void bio_add_page(struct wbc_cache *c, struct wbc_bio *b, struct page *p)
{
	char *data = page_data(c, p);
	struct iovec *last = b->iovcnt ? &b->iov[b->iovcnt - 1] : NULL;
	if (last && (char *)last->iov_base + last->iov_len == data) {
		last->iov_len += c->page_size;
	} else {
		b->iov[b->iovcnt].iov_base = data;
		b->iov[b->iovcnt].iov_len = c->page_size;
		b->iovcnt++;
	}
	b->pages[b->nr_pages++] = p;
	b->len += c->page_size;
}

/* A one-file backend (an export, a device) ends at its size, which the
 * file's may reach: a bio's last page is not sent past i_size (rounded up
 * to the backend's alignment); the rest of that page is padding anyway.
 * @off: the bio's offset.  Under ino->lock. */
static void bio_clamp_locked(struct inode *ino, struct wbc_bio *b, uint64_t off)
{
	assert_held(&ino->lock);
	struct backend *be = ino->dev->be;
	uint64_t align = be->dio_align ? be->dio_align : 1;
	uint64_t end = off + b->len, want = (ino->i_size + align - 1) / align * align;
	if (want <= off || want >= end)
		return;
	size_t cut = (size_t)(end - want);
	assert(cut < b->iov[b->iovcnt - 1].iov_len);
	b->iov[b->iovcnt - 1].iov_len -= cut;
	b->len -= cut;
}

/* Count the plug's pages moved dirty -> writeback. */
static void plug_account(struct wbc_dev *dev, struct bio_plug *p)
{
	if (p->acct_pages)
		account_domains(dev, p->acct_group, -p->acct_pages, 0);
	p->acct_pages = 0;
}

void plug_flush(struct wbc_dev *dev, struct bio_plug *p)
{
	if (!p)
		return;
	plug_account(dev, p);
	if (!p->n)
		return;
	bio_submit(dev->be, p->bios, p->n);
	p->n = 0;
	p->bytes = 0;
}

static void submit_bio_write(struct wbc_dev *dev, struct inode *ino, struct wbc_bio *b,
			     uint64_t first_index, struct bio_plug *plug)
{
	b->io.op = WBC_IO_WRITE;
	b->io.file = ino->obj;
	b->off = first_index << dev->cache->page_shift;
	b->end_io = wb_end_io;
	b->inode = ino;
	igrab(ino);
	if (plug) {
		plug->bios[plug->n++] = b;
		plug->bytes += b->len;
		if (plug->n == PLUG_MAX || plug->bytes >= dev->be->max_io)
			plug_flush(dev, plug);
		return;
	}
	bio_submit(dev->be, &b, 1);
}

/* Under ino->lock: the next page tagged @tag in [*idx, *end], wrapping
 * once to [0, cyc_start) for a cyclic pass. */
static bool next_tagged_locked(struct inode *ino, enum pm_tag tag, uint64_t *idx, uint64_t *end,
			       bool *wrapped, uint64_t cyc_start, uint64_t *first)
{
	assert_held(&ino->lock);
	for (;;) {
		if (pm_next(&ino->map, *idx, tag, first) && *first <= *end)
			return true;
		if (*wrapped)
			return false;
		*wrapped = true;
		*idx = 0;
		*end = cyc_start - 1;
	}
}

/* Under ino->lock, at the end of a pass: the cyclic resume point and what
 * the flusher needs to know to put the file back. */
static void pass_end_locked(struct inode *ino, struct wbc_ctl *ctl, uint64_t idx)
{
	assert_held(&ino->lock);
	if (ctl->range_cyclic)
		ino->writeback_index = idx;
	ctl->still_dirty = ino->nr_dirty > 0;
	ctl->size_dirty = !ctl->still_dirty && !ino->nr_writeback &&
			  ino->backend_size != ino->i_size;
}

/*
 * Write the dirty pages of @ino as @ctl says.  Returns the pages submitted.
 * The caller holds a reference on @ino and no lock.  A file with one run
 * of dirty pages costs one hold of ino->lock: tagging (sync), the backoff
 * check (ctl->backoff), finding and claiming the pages, and the end-of-pass
 * state (ctl->still_dirty, ctl->size_dirty) happen in it.  Background
 * passes take their bio before the lock (the file is on the lists because
 * it has dirty pages); sync passes only once they found a page.
 * Under file_lock=file (the old policy, for experiments) the file's lock
 * is held from each run's collection until its bio is submitted (the
 * plug flushed: the backend's submit returned), so the file's writers,
 * which hold it across each page's write (core/file.c), wait for the
 * submission and it for them; never across a wait for a free bio.
 */
long write_inode_pages(struct inode *ino, struct wbc_ctl *ctl)
{
	struct wbc_dev *dev = ino->dev;
	struct wbc_cache *c = dev->cache;
	bool sync = ctl->sync_mode == WB_SYNC_ALL;
	enum pm_tag tag = sync ? PM_TAG_TOWRITE : PM_TAG_DIRTY;
	unsigned maxp = bio_max_pages(dev);
	long written = 0;
	struct wbc_bio *b = sync ? NULL : bio_get(dev, ctl->plug);

	ctl->backed_off = false;
	wb_file_lock(ino);
	pthread_mutex_lock(&ino->lock);
	if (sync)
		tag_pages_locked(ino, ctl->range_start, ctl->range_end);
	if (ctl->backoff && ino->retry_after && ino->retry_after > wbc_now_ns()) {
		/* failed recently: its turn comes after the backoff */
		ctl->backed_off = true;
		pass_end_locked(ino, ctl, ino->writeback_index);
		pthread_mutex_unlock(&ino->lock);
		wb_file_unlock(ino, NULL);
		if (b)
			bio_put(dev, b);
		return 0;
	}
	uint64_t idx = ctl->range_cyclic ? ino->writeback_index : ctl->range_start;
	uint64_t end = ctl->range_end;
	uint64_t cyc_start = idx;
	bool wrapped = !ctl->range_cyclic || idx == 0;

	for (;;) {
		uint64_t first;
		if (ctl->nr_to_write <= 0 ||
		    !next_tagged_locked(ino, tag, &idx, &end, &wrapped, cyc_start, &first)) {
			/* done, or the whole file was visited (resume at 0) */
			pass_end_locked(ino, ctl, ctl->nr_to_write <= 0 ? idx : 0);
			break;
		}
		if (ino->sizing) {
			/* truncate or a size sync owns the file's I/O now */
			if (!sync) {
				pass_end_locked(ino, ctl, first);
				break;
			}
			inode_wait_locked(ino);
			continue;
		}
		if (!b) {
			/* never wait for a bio under the lock */
			pthread_mutex_unlock(&ino->lock);
			wb_file_unlock(ino, NULL);
			b = bio_get(dev, ctl->plug);
			wb_file_lock(ino);
			pthread_mutex_lock(&ino->lock);
			continue;
		}
		uint64_t i = first;
		while (b->nr_pages < maxp && b->iovcnt < IOV_MAX && ctl->nr_to_write > 0 &&
		       i <= end) {
			struct page *p = pm_lookup(&ino->map, i);
			if (!p || !pm_tag_get(&ino->map, i, tag))
				break;
			uint32_t fl = pg_flags(p);
			if (fl & PG_LOCKED) {
				/* a writer is copying into it: sync waits for
				 * it, background passes skip it */
				if (b->nr_pages == 0 && sync)
					page_wait_unlocked(ino, p);
				break;
			}
			assert((fl & PG_DIRTY) && !(fl & PG_WRITEBACK));
			/* DIRTY -> WRITEBACK in one store: with ino->lock held
			 * and PG_LOCKED clear, nothing else changes the flags */
			atomic_store_explicit(&p->flags, (fl & ~PG_DIRTY) | PG_WRITEBACK,
					      memory_order_relaxed);
			pm_tag_clear(&ino->map, i, PM_TAG_DIRTY);
			pm_tag_clear(&ino->map, i, PM_TAG_TOWRITE);
			pm_tag_set(&ino->map, i, PM_TAG_WRITEBACK);
			bio_add_page(c, b, p);
			ctl->nr_to_write--;
			if (i == UINT64_MAX)
				break;
			i++;
		}
		unsigned n = b->nr_pages;
		if (!n) {
			if (sync)
				continue;   /* waited for the locked page: look again */
			/* first page locked by a writer: skip it this pass */
			idx = first + 1;
			continue;
		}
		ino->nr_dirty -= n;
		ino->nr_writeback += n;
		if (dev->be->single)
			bio_clamp_locked(ino, b, first << c->page_shift);
		idx = i;
		/* look ahead, so a file written in one I/O costs one hold */
		uint64_t next;
		bool last = ctl->nr_to_write <= 0 ||
			    !next_tagged_locked(ino, tag, &idx, &end, &wrapped, cyc_start, &next);
		if (last)
			pass_end_locked(ino, ctl, ctl->nr_to_write <= 0 ? idx : 0);
		pthread_mutex_unlock(&ino->lock);
		if (ctl->plug) {
			struct bio_plug *p = ctl->plug;
			if (p->acct_pages && p->acct_group != ino->group)
				plug_account(dev, p);
			p->acct_group = ino->group;
			p->acct_pages += n;
		} else {
			account_writeback(ino, n);
		}
		submit_bio_write(dev, ino, b, first, ctl->plug);
		wb_file_unlock(ino, ctl->plug);
		b = NULL;
		written += n;
		if (last) {
			ctl->pages_written += written;
			return written;
		}
		if (!sync)
			b = bio_get(dev, ctl->plug);
		wb_file_lock(ino);
		pthread_mutex_lock(&ino->lock);
	}
	pthread_mutex_unlock(&ino->lock);
	wb_file_unlock(ino, NULL);
	if (b)
		bio_put(dev, b);
	ctl->pages_written += written;
	return written;
}

bool write_inode_all(struct inode *ino)
{
	struct wbc_ctl ctl = {
		.sync_mode = WB_SYNC_ALL,
		.nr_to_write = LONG_MAX,
		.range_start = 0,
		.range_end = UINT64_MAX,
	};
	write_inode_pages(ino, &ctl);
	return ctl.still_dirty;
}
