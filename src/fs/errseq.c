/*
 * Writeback error sequence, after the kernel's errseq_t: every recorded
 * error bumps a counter; a handle remembers the counter value it last saw,
 * and fsync reports the latest error when the counter has moved since.  So
 * each handle open when an error happened sees it exactly once.  A handle
 * opened afterwards sees it too while no handle has been told it yet (the
 * kernel's SEEN flag, Linux 4.16): an error met when no handle was open
 * (written, closed, written back later) is the next opener's, not lost.
 * Callers hold the lock that protects the struct.
 */
#include "fs/fs.h"

void errseq_record(struct errseq *e, int err)
{
	assert(err < 0);
	/* an errno (a backend's out-of-range code would not fit err's
	 * 24 bits: -(1 << 24) read as 0) */
	e->err = err >= -4095 ? err : -EIO;
	/* 0 means no error ever (errseq_sample's inherit, the orphans of
	 * fs/inode.c, end_io.c): a wrapping counter skips it, or the error
	 * that wrapped it would be no opener's */
	if (!++e->seq)
		e->seq = 1;
	e->seen = false;
	e->retried = false;
	e->healed = false;
}

void errseq_sample(const struct errseq *e, uint32_t *since, bool *inherit)
{
	*since = e->seq;
	*inherit = e->seq && !e->seen;
}

int errseq_check_advance(struct errseq *e, uint32_t *since, bool *inherit)
{
	int err = errseq_check_advance_quiet(e, since, inherit);
	if (err)
		e->seen = true;
	return err;
}

/* The handle's own sample moves (it tells each error once), but the
 * error stays unseen: still the next opener's to inherit (an internal
 * handle's writeback, WBC_O_NOERRSEEN, must not take it from the user) */
int errseq_check_advance_quiet(struct errseq *e, uint32_t *since, bool *inherit)
{
	bool inherited = *inherit;
	*inherit = false;
	if (*since == e->seq && !(inherited && !e->healed))
		return 0;
	*since = e->seq;
	return e->err;
}

int errseq_peek(const struct errseq *e, uint32_t since)
{
	return since != e->seq ? e->err : 0;
}

/* A device keeps one sequence for the errors of all its files, under
 * err_lock (reported by wbc_dev_sync). */
void dev_record_error(struct wbc_dev *dev, int err)
{
	pthread_mutex_lock(&dev->err_lock);
	errseq_record(&dev->wb_err, err);
	pthread_mutex_unlock(&dev->err_lock);
}
