/*
 * Writeback error sequence, after the kernel's errseq_t: every recorded
 * error bumps a counter; a handle remembers the counter value it last saw,
 * and fsync reports the latest error when the counter has moved since.  So
 * each handle open when an error happened sees it exactly once, and handles
 * opened afterwards (which sample the current value) do not.
 * Callers hold the lock that protects the struct.
 */
#include "fs/fs.h"

void errseq_record(struct errseq *e, int err)
{
	assert(err < 0);
	e->err = err;
	e->seq++;
}

int errseq_check_advance(const struct errseq *e, uint32_t *since)
{
	if (*since == e->seq)
		return 0;
	*since = e->seq;
	return e->err;
}

/* A device keeps one sequence for the errors of all its files, under
 * err_lock (reported by wbc_dev_sync). */
void dev_record_error(struct wbc_dev *dev, int err)
{
	pthread_mutex_lock(&dev->err_lock);
	errseq_record(&dev->wb_err, err);
	pthread_mutex_unlock(&dev->err_lock);
}
