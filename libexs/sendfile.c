/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs_sendfile (exs_sendfile(3)): files, paths and memory sent as ordinary
 * stream data. An operation is a run of internal sends of at most
 * EXS_SF_WINDOW bytes each, EXS_SF_DEPTH of them in flight, started through
 * sock.c like any exs_send (the same credits, placement and completions),
 * and waited for on a private queue. A window of a regular file is its
 * pages mapped read-only and registered for the send alone (zero copy);
 * what cannot be mapped or registered is copied into a registered bounce
 * buffer of EXS_SF_DEPTH * EXS_SF_BOUNCE bytes. So one operation never pins
 * more than EXS_SF_DEPTH * EXS_SF_WINDOW bytes of its source.
 *
 * An asynchronous call runs on a thread of its own (EXS_BLOCK runs in the
 * caller). While it runs the socket's other sends wait as for a credit
 * (sock.c), so the stream keeps the order of the calls. This file sits
 * between api.c and sock.c: it never calls up.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exs_int.h"

#define LOCK() pthread_mutex_lock(&exs_g.lock)
#define UNLOCK() pthread_mutex_unlock(&exs_g.lock)

struct sf_elem {
	int type;	/* EXS_SFV_* */
	int fd;		/* FD and PATH: ours (a dup, or what we opened); else -1 */
	bool map;	/* a regular file: try windows of mapped pages */
	bool seek;	/* pread at off; else read() from where the source is */
	const char *base; /* IOV */
	exs_mhandle_t mh;
	int64_t off;
	size_t len;
};

struct sf_slot {
	bool busy;
	void *map; /* its window's mapping, or NULL (bounce or memory) */
	size_t map_len;
};

struct exs_sf {
	int fd, flags;
	uint32_t id; /* the socket's, once begun */
	struct exs_queue *q; /* the caller's (a reference held), or NULL */
	exs_ahandle_t ah;
	const struct exs_sendfilevec *vec;
	struct exs_queue *pq; /* the internal sends' completions */
	char *bounce;
	struct exs_mreg *bounce_m;
	char *zero; /* EXS_SF_ZERO zeroed bytes that holes are sent from */
	struct exs_mreg *zero_m;
	struct sf_slot slot[EXS_SF_DEPTH];
	unsigned inflight;
	size_t total, sent;
	int err;
	uint32_t n;
	struct sf_elem e[];
};

static unsigned sf_running; /* operations started and not ended (exs_g.lock) */

static void sf_close_elems(struct exs_sf *sf)
{
	for (uint32_t i = 0; i < sf->n; i++)
		if (sf->e[i].fd >= 0) {
			close(sf->e[i].fd);
			sf->e[i].fd = -1;
		}
}

void exs_sf_free(struct exs_sf *sf)
{
	if (!sf)
		return;
	sf_close_elems(sf);
	LOCK(); /* nothing in flight holds them now */
	if (sf->bounce_m)
		exs_mreg_delete(sf->bounce_m);
	if (sf->zero_m)
		exs_mreg_delete(sf->zero_m);
	UNLOCK();
	if (sf->bounce)
		munmap(sf->bounce, (size_t)EXS_SF_DEPTH * EXS_SF_BOUNCE);
	if (sf->zero)
		munmap(sf->zero, EXS_SF_ZERO);
	if (sf->pq)
		exs_queue_delete(sf->pq->h);
	if (sf->q)
		exs_queue_unref(sf->q);
	free(sf);
}

/* One file element's descriptor (ours), what it is, and its range checked
 * against the file's size when the size is known. */
static int sf_open_file(struct sf_elem *e, const union exs_xfvec *u)
{
	struct stat st;
	int fl;

	if (e->type == EXS_SFV_PATH) {
		if (!u->exs_pathv)
			return -EINVAL;
		if (strnlen(u->exs_pathv, PATH_MAX) >= PATH_MAX)
			return -ENAMETOOLONG;
		e->fd = open(u->exs_pathv, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (e->fd < 0)
			return -errno;
	} else {
		if (u->exs_fd < 0 || (fl = fcntl(u->exs_fd, F_GETFL)) < 0)
			return -EBADF;
		if ((fl & O_ACCMODE) == O_WRONLY)
			return -EBADF; /* as sendfile(2): the source must be open for reading */
		/* ours: the caller may close its descriptor before the event */
		e->fd = fcntl(u->exs_fd, F_DUPFD_CLOEXEC, 0);
		if (e->fd < 0)
			return -errno;
	}
	if (fstat(e->fd, &st))
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	e->seek = lseek(e->fd, 0, SEEK_CUR) >= 0;
	if (!e->seek && e->off != 0)
		return -ESPIPE; /* a pipe, FIFO or socket is read from where it is */
	/* a regular file's range must lie inside it; one that says it is empty
	 * (most of /proc) is read until it ends, as a pipe is */
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		if ((uint64_t)e->off + e->len > (uint64_t)st.st_size)
			return -EINVAL;
		e->map = true;
	}
	return 0;
}

/* Memory: its registration must cover it now (and, checked again, when
 * each window of it starts). */
static int sf_check_mem(const struct sf_elem *e)
{
	struct exs_mreg *m;
	int ret;

	LOCK();
	ret = exs_mreg_covering(e->mh, e->base, e->len, EXS_EVT_SEND, &m);
	UNLOCK();
	return ret;
}

/* The checked elements of an exs_sendfile, files opened: 0 or -errno. */
int exs_sf_new(const struct exs_sendfilevec *v, int cnt, int flags, struct exs_sf **ret_sf)
{
	struct exs_sf *sf;
	size_t total = 0;
	int ret = 0;

	if (!v || cnt < 1 || cnt > EXS_SENDVEC_MAX)
		return -EINVAL;
	sf = calloc(1, sizeof(*sf) + (size_t)cnt * sizeof(sf->e[0]));
	if (!sf)
		return -ENOMEM;
	sf->n = (uint32_t)cnt;
	sf->flags = flags;
	sf->vec = v;
	for (int i = 0; i < cnt; i++)
		sf->e[i].fd = -1;
	for (int i = 0; i < cnt && !ret; i++) {
		struct sf_elem *e = &sf->e[i];

		e->type = v[i].exs_sfv_type;
		e->off = v[i].exs_sfv_off;
		e->len = v[i].exs_sfv_len;
		if (!e->len || e->off < 0 || e->len > (size_t)INT64_MAX ||
		    (uint64_t)e->off > (uint64_t)INT64_MAX - e->len ||
		    e->len > (size_t)SSIZE_MAX - total) {
			ret = -EINVAL;
			break;
		}
		total += e->len;
		switch (e->type) {
		case EXS_SFV_IOV:
			e->base = v[i].exs_sfv_u.exs_iov.exs_base;
			e->mh = v[i].exs_sfv_u.exs_iov.exs_mhandle;
			if (!e->base || (uint64_t)e->off > UINTPTR_MAX - (uintptr_t)e->base ||
			    e->len > UINTPTR_MAX - (uintptr_t)e->base - (uint64_t)e->off) {
				ret = -EINVAL;
				break;
			}
			e->base += e->off;
			ret = sf_check_mem(e);
			break;
		case EXS_SFV_FD:
		case EXS_SFV_PATH:
			ret = sf_open_file(e, &v[i].exs_sfv_u);
			break;
		default:
			ret = -EINVAL;
		}
	}
	sf->total = total;
	if (ret) {
		exs_sf_free(sf);
		return ret;
	}
	*ret_sf = sf;
	return 0;
}

/* Lock held: make sf the socket's running exs_sendfile. -EBUSY while
 * another runs (waited out with EXS_CREDIT_WAIT or EXS_BLOCK). */
int exs_sf_begin(struct exs_sf *sf, struct exs_sock *s, struct exs_queue *q, exs_ahandle_t ah)
{
	uint32_t id = s->id;

	for (;;) {
		if (exs_sock_by_id(id) != s)
			return -EBADF;
		if (s->state != EXS_S_CONNECTED || !s->conn)
			return -ENOTCONN;
		if (s->type != SOCK_STREAM)
			return -EOPNOTSUPP;
		if (!s->sendfile)
			break;
		if (!(sf->flags & (EXS_CREDIT_WAIT | EXS_BLOCK)))
			return -EBUSY;
		exs_g_wait(NULL, false, NULL, NULL);
	}
	if (sf_running >= EXS_MAX_SENDFILES)
		return -EAGAIN;
	sf_running++;
	s->sendfile = true;
	sf->fd = s->fd;
	sf->id = id;
	sf->q = q;
	sf->ah = ah;
	return 0;
}

/* Wait for one internal send's completion and let go of its slot. */
static void sf_reap(struct exs_sf *sf)
{
	exs_event_t ev;
	struct sf_slot *sl;

	if (exs_queue_dequeue(sf->pq->h, &ev, 1, NULL, false) != 1) {
		if (!sf->err)
			sf->err = EIO;
		sf->inflight = 0; /* nothing sane is left to wait for */
		return;
	}
	sl = ev.exs_evt_ahandle; /* a slot of ours: no tag an exs_cancel of the caller's names */
	if (sl < sf->slot || sl >= sf->slot + EXS_SF_DEPTH)
		sl = &sf->slot[0]; /* cannot be: the private queue is ours alone */
	if (sl->map)
		munmap(sl->map, sl->map_len);
	sl->map = NULL;
	sl->busy = false;
	sf->inflight--;
	if (ev.exs_evt_errno) {
		if (!sf->err)
			sf->err = ev.exs_evt_errno;
	} else {
		sf->sent += ev.exs_evt_union.exs_evt_xfer.exs_evt_length;
	}
}

/* A free slot, after waiting for a completion if none is. */
static int sf_slot(struct exs_sf *sf)
{
	for (;;) {
		for (int i = 0; i < EXS_SF_DEPTH; i++)
			if (!sf->slot[i].busy)
				return i;
		sf_reap(sf);
	}
}

/* Start one internal send of slot k: 0 or -errno. */
static int sf_issue(struct exs_sf *sf, int k, const char *buf, size_t len, exs_mhandle_t mh)
{
	struct exs_op op = { .kind = EXS_EVT_SEND, .q = sf->pq, .ah = &sf->slot[k],
			     .buf = (char *)buf, .len = len, .user_mh = EXS_MHANDLE_UNREGISTERED,
			     .sendfile = true };
	struct exs_sock *s;
	int ret;

	LOCK();
	if ((ret = exs_mreg_covering(mh, buf, len, EXS_EVT_SEND, &op.mreg)))
		goto out;
	for (;;) {
		s = exs_sock_by_id(sf->id);
		if (!s || s->state != EXS_S_CONNECTED) {
			ret = -EPIPE; /* closed (or shut) under us */
			break;
		}
		ret = exs_sock_xfer(s, &op);
		if (ret != -EBUSY)
			break;
		exs_progress_idle(); /* coalesced sends go: the peer's credits may wait for them */
		exs_progress_arm(); /* the completion that frees a credit must wake us */
		exs_g_wait(NULL, false, NULL, NULL);
	}
out:
	UNLOCK();
	if (!ret) {
		sf->slot[k].busy = true;
		sf->inflight++;
	}
	return ret;
}

/* Errors of a mapped window's registration that the bounce buffer avoids;
 * the others are the connection's. */
static bool sf_copy_helps(int err)
{
	return err != EPIPE && err != ECONNRESET && err != ECONNABORTED && err != ENOTCONN &&
	       err != EMSGSIZE;
}

/* Anonymous memory of len bytes, registered (RECV_DISABLE: the device
 * only reads it): 0 or -ENOMEM. */
static int sf_area(size_t len, char **ret_p, struct exs_mreg **ret_m)
{
	void *p;

	if (*ret_p)
		return 0;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	memset(p, 0, len); /* pages of its own, not the shared zero page */
	*ret_p = p;
	*ret_m = exs_mreg_new(p, len, EXS_MRF_RECV_DISABLE);
	return *ret_m ? 0 : -ENOMEM;
}

/* How much of a regular file at `at` (at most len) is one hole, or one run
 * of data (*hole false); a file system that cannot tell has no holes. */
static size_t sf_extent(int fd, off_t at, size_t len, bool *hole)
{
	off_t next = lseek(fd, at, SEEK_DATA);

	*hole = false;
	if (next < 0 && errno == ENXIO) {
		*hole = true; /* a hole up to the end */
		return len;
	}
	if (next < 0)
		return len;
	if (next > at) {
		*hole = true;
		return (uint64_t)(next - at) < len ? (size_t)(next - at) : len;
	}
	next = lseek(fd, at, SEEK_HOLE);
	if (next > at && (uint64_t)(next - at) < len)
		return (size_t)(next - at);
	return len;
}

/* Read up to len bytes of e at pos into p: how many (short only at the
 * source's end), or -errno. */
static ssize_t sf_read(const struct sf_elem *e, size_t pos, char *p, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = e->seek ? pread(e->fd, p + got, len - got, e->off + (off_t)(pos + got))
				    : read(e->fd, p + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (!n)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Send bytes [pos, pos + *len) of file element e from slot k: mapped if it
 * may and can be, else copied (*len may shrink to the bounce size, or at
 * the source's end). 0 or -errno. */
static int sf_file_window(struct exs_sf *sf, struct sf_elem *e, int k, size_t pos, size_t *len)
{
	struct sf_slot *sl = &sf->slot[k];
	ssize_t got;
	int ret;

	if (e->map) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		off_t at = (off_t)(e->off + (int64_t)pos);
		size_t skew = (size_t)at % page;
		bool hole;

		*len = sf_extent(e->fd, at, *len, &hole);
		if (hole) {
			/* read as zeros, and sent as zeros: nothing of it is
			 * read, mapped or pinned (a hole of tmpfs would fill) */
			if (*len > EXS_SF_ZERO)
				*len = EXS_SF_ZERO;
			ret = sf_area(EXS_SF_ZERO, &sf->zero, &sf->zero_m);
			if (!ret && !(ret = sf_issue(sf, k, sf->zero, *len, sf->zero_m->h)))
				return 0;
			if (!sf_copy_helps(-ret))
				return ret;
			goto copy;
		}
		sl->map_len = *len + skew;
		sl->map = mmap(NULL, sl->map_len, PROT_READ, MAP_SHARED, e->fd, at - (off_t)skew);
		if (sl->map != MAP_FAILED) {
			madvise(sl->map, sl->map_len, MADV_WILLNEED); /* read ahead */
			ret = sf_issue(sf, k, (char *)sl->map + skew, *len,
				       EXS_MHANDLE_UNREGISTERED);
			if (!ret)
				return 0;
			munmap(sl->map, sl->map_len);
			sl->map = NULL;
			if (!sf_copy_helps(-ret))
				return ret;
		} else {
			sl->map = NULL;
		}
copy:
		e->map = false; /* the rest of it is copied */
	}
	if ((ret = sf_area((size_t)EXS_SF_DEPTH * EXS_SF_BOUNCE, &sf->bounce, &sf->bounce_m)))
		return ret;
	if (*len > EXS_SF_BOUNCE)
		*len = EXS_SF_BOUNCE;
	got = sf_read(e, pos, sf->bounce + (size_t)k * EXS_SF_BOUNCE, *len);
	if (got < 0)
		return (int)got;
	if (!got)
		return -ENODATA;
	*len = (size_t)got;
	return sf_issue(sf, k, sf->bounce + (size_t)k * EXS_SF_BOUNCE, *len, sf->bounce_m->h);
}

/* Undo exs_sf_begin: the socket takes other sends again. */
static void sf_end(struct exs_sf *sf)
{
	struct exs_sock *s;

	LOCK();
	sf_running--;
	s = exs_sock_by_id(sf->id);
	if (s)
		s->sendfile = false;
	pthread_cond_broadcast(&exs_g.cond);
	UNLOCK();
}

/* Run the operation to its end: every element's bytes sent, or the first
 * error. Then let go of the socket's claim and wake who waits for it. */
static void sf_run(struct exs_sf *sf)
{
	sf->pq = exs_queue_new(EXS_SF_DEPTH);
	if (!sf->pq)
		sf->err = ENOMEM;
	for (uint32_t i = 0; i < sf->n && !sf->err; i++) {
		struct sf_elem *e = &sf->e[i];
		size_t pos = 0;

		while (pos < e->len && !sf->err) {
			int k = sf_slot(sf), ret;
			size_t len = e->len - pos;

			if (sf->err)
				break;
			if (len > EXS_SF_WINDOW)
				len = EXS_SF_WINDOW;
			if (e->type == EXS_SFV_IOV)
				ret = sf_issue(sf, k, e->base + pos, len, e->mh);
			else
				ret = sf_file_window(sf, e, k, pos, &len);
			if (ret)
				sf->err = -ret;
			pos += len;
		}
		if (e->fd >= 0 && !sf->err) {
			close(e->fd); /* exs_pathv: closed at its end, as the guide says */
			e->fd = -1;
		}
	}
	while (sf->inflight)
		sf_reap(sf);
	sf_close_elems(sf);
	sf_end(sf);
}

/* The event that ends an asynchronous operation, posted once everything
 * of it is released (its queue reference goes with the event). */
static void *sf_thread(void *arg)
{
	struct exs_sf *sf = arg;
	struct exs_queue *q;
	exs_event_t ev;
	bool unsignaled;

	sf_run(sf);
	memset(&ev, 0, sizeof(ev));
	ev.exs_evt_errno = sf->err;
	ev.exs_evt_socket = sf->fd;
	ev.exs_evt_ahandle = sf->ah;
	ev.exs_evt_type = EXS_EVT_SENDFILE;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_buffer = (void *)sf->vec;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_mhandle = EXS_MHANDLE_UNREGISTERED;
	ev.exs_evt_union.exs_evt_xfer.exs_evt_length = sf->sent;
	unsignaled = sf->flags & EXS_UNSIGNALED;
	q = sf->q;
	sf->q = NULL;
	exs_sf_free(sf);
	if (!q)
		return NULL;
	if (!ev.exs_evt_errno && unsignaled)
		exs_queue_unref(q);
	else
		exs_queue_post(q, &ev);
	return NULL;
}

/* Run a begun operation: in the caller with EXS_BLOCK (the total sent, or
 * -errno), else on a thread of its own (0). sf is freed either way. */
ssize_t exs_sf_start(struct exs_sf *sf)
{
	pthread_t t;
	ssize_t ret;
	int err;

	if (sf->flags & EXS_BLOCK) {
		sf_run(sf);
		ret = sf->err ? -sf->err : (ssize_t)sf->sent;
		exs_sf_free(sf);
		return ret;
	}
	err = exs_thread_start(&t, sf_thread, sf, NULL);
	if (!err)
		return 0;
	sf_end(sf); /* nothing was sent: as if it never began */
	exs_sf_free(sf);
	return -EAGAIN;
}
