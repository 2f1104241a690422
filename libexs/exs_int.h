/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Private to libexs: the objects behind the public handles and the calls
 * between the library's modules. Calls go one way, down:
 *
 *   api.c       public calls, argument checks, EXS_BLOCK/EXS_CREDIT_WAIT waits
 *   progress.c  the progress thread: exsd's input, completions, ticks
 *     -> sendfile.c  exs_sendfile's windows, run as internal sends through
 *                    sock.c (its own thread when asynchronous)
 *     -> broker.c  the set-up that exsd brokers (bind, listen, connect,
 *                  accept, exsd's events and requests)
 *     -> sock.c    the fd table and each socket's life cycle (close, shutdown)
 *     -> spare.c   connections built before a connect or accept needs them
 *     -> conn.c    one established connection: state machine and data path
 *     -> cq.c      the CQs a device's connections share; whose a completion is
 *     -> zone.c    the pages unregistered transfers are copied through
 *     -> verbs.c (devices, memory), queue.c (event queues), ctl.c (the
 *        channel to exsd, which hands what it reads back to its caller)
 *
 * A lower file reports upward by return values and state that the caller
 * reads, never by calling up. One library lock (exs_g.lock) guards
 * sockets, connections and registrations; queues have their own lock so
 * dequeuing never waits for the data path.
 */
#ifndef EXS_INT_H
#define EXS_INT_H

/* a counter the progress thread reads without exs_g.lock */
#define EXS_COUNT(x, n) ((void)__atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED))

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>

#include "exs.h"
#include "exs_wire.h"
#include "exs_control.h"
#include "exs_qpattr.h"

/* Start a detached thread of the library's (named `name` if not NULL) that
 * takes none of the application's signals: they are not ours to take.
 * 0, or pthread_create's errno. */
static inline int exs_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *name)
{
	sigset_t all, old;
	int ret;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return ret;
	pthread_detach(*t);
	if (name)
		pthread_setname_np(*t, name);
	return 0;
}


/* bounds on what a caller controls */
#define EXS_MAX_SOCKETS 65536 /* fds fit 16 bits: see exs_sock_by_id */
#define EXS_MAX_QDEPTH (1 << 20)
#define EXS_MAX_CREDITS 1024
#define EXS_DEFAULT_CREDITS 32
#define EXS_DEFAULT_SP_MAX 1024 /* SEQPACKET messages this small go eagerly */
#define EXS_MAX_BACKLOG 4096
#define EXS_MAX_SP_MAX 65536 /* small-packet maximum size */
#define EXS_MAX_INLINE 4096 /* the most inline data asked of a device */
#define EXS_MAX_STREAM_BUF INT32_MAX
#define EXS_MAX_XFER ((size_t)INT32_MAX)
#define EXS_MAX_DEVS 16
#define EXS_MAX_CHUNKS 16 /* writes per message, for devices with a small max_msg_sz */
#define EXS_MAX_READS 16 /* receives reading a peer's persistent send at once (exsd's READ depth) */
/* EXS_IOV_MAX (exs.h) bounds exs_sendmsg/exs_recvmsg's iovec */
#define EXS_CTL_TIMEOUT_MS 10000
#define EXS_LINGER_MS 30000 /* a closing socket's sends may wait this long for adverts */
#define EXS_FIN_MS 5000     /* then its FIN (or ABORT) this long for its completion */
#define EXS_PROBE_MS 1000   /* the peer has this long to answer an in-band PING */
/* exs_sendfile: bytes per internal send, sends in flight per operation (so
 * at most DEPTH * WINDOW bytes of a file are mapped and pinned), the
 * bounce buffer per slot for what is copied, the zeros holes are sent
 * from, operations at once */
#define EXS_SF_WINDOW ((size_t)16 << 20)
#define EXS_SF_DEPTH 4
#define EXS_SF_BOUNCE ((size_t)256 << 10)
#define EXS_SF_ZERO ((size_t)1 << 20) /* a file's holes are sent from this many zeros */
#define EXS_MAX_SENDFILES 64

static inline int exs_err(int e)
{
	errno = e;
	return -1;
}

/* ---- handle.c: public queue and registration handles (not pointers) */
#if UINTPTR_MAX > 0xffffffffu
#define EXS_H_IDX_BITS 32
#define EXS_HTAB_CHUNKS 1024 /* 2^20 objects of a kind */
#else
#define EXS_H_IDX_BITS 16
#define EXS_HTAB_CHUNKS 63
#endif
#define EXS_HTAB_CHUNK 1024
#define EXS_H_IDX_MASK (((uintptr_t)1 << EXS_H_IDX_BITS) - 1)
#define EXS_H_STATE_MAX ((uint32_t)(UINTPTR_MAX >> EXS_H_IDX_BITS))
struct exs_hslot {
	void *obj;      /* the slot's object, kept across generations */
	uint32_t state; /* generation * 2 + live */
};
struct exs_htab {
	pthread_mutex_t lock;
	struct exs_hslot *chunk[EXS_HTAB_CHUNKS];
	uint32_t used, nfree, *free;
};
#define EXS_HTAB_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }
int exs_htab_alloc(struct exs_htab *t, uint32_t *ret_idx, void **ret_obj);
uintptr_t exs_htab_publish(struct exs_htab *t, uint32_t idx, void *obj);
void exs_htab_release(struct exs_htab *t, uint32_t idx, void *obj);
void *exs_htab_get(struct exs_htab *t, uintptr_t h, uint32_t *ret_idx);
bool exs_htab_kill(struct exs_htab *t, uintptr_t h);

/* ---- queue.c */
struct exs_queue {
	exs_qhandle_t h; /* the handle of its current life */
	uint32_t idx;    /* its slot */
	bool live;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	exs_event_t *ev;
	unsigned cap, head, count;
	unsigned refs; /* started operations that will post here */
	unsigned spin_us; /* adaptive busy-poll budget before sleeping */
	int wait; /* EXS_WAIT_* */
	/* an EXS_FD_BUSYPOLL socket's operation named it: adaptive waits
	 * spin whole (exs_queue_mark_busy; atomic) */
	bool busy;
	int sig; /* EXS_QATTR_SIGNAL: raised on every post, 0 none */
	bool used; /* dequeued from or posted to: EXS_QATTR_WAIT is fixed */
	int efd; /* exs_qfd: readable while events wait; -1 until asked for */
	/* bumped (atomically) by every post and by the deletion: a spinning
	 * waiter compares it without the lock, and locks q when it moved */
	unsigned posts;
	/* threads asleep on cond (lock held): a post wakes only when there
	 * are (a spinning waiter sees `posts` move; it never sleeps on cond).
	 * Not reset by a new life: a waiter of the last one may still sleep */
	unsigned sleeping;
};
struct exs_queue *exs_queue_new(int depth);
/* The live queue a handle names, or NULL: a handle of a deleted queue
 * names nothing, whatever its slot serves now. */
struct exs_queue *exs_queue_get(exs_qhandle_t h);
/* The same with a reference taken (exs_queue_unref lets go), atomically with
 * the check: the queue cannot be deleted in between; -EINVAL if none. */
int exs_queue_hold(exs_qhandle_t h, struct exs_queue **ret_q);
/* These take the handle, so that a queue deleted (and its object reused)
 * while the call waits is seen as gone: -EINVAL. */
int exs_queue_delete(exs_qhandle_t h);
/* cancellable: the wait is a cancellation point (guide §11.3.1) */
int exs_queue_dequeue(exs_qhandle_t h, exs_event_t *ev, int count, const struct timeval *tmo,
		      bool cancellable);
int exs_queue_modify(exs_qhandle_t h, int attr, int value);
int exs_queue_status(exs_qhandle_t h, int attr, int *value);
int exs_queue_fd(exs_qhandle_t h);
void exs_queue_post(struct exs_queue *q, const exs_event_t *ev);
/*
 * Thread cancellation (guide §11.3.1): every public call runs with
 * cancellation disabled (EXS_NOCANCEL, restored on every return), so that
 * no cancellation point inside the library (a write to exsd, say) can end
 * a thread that holds a lock. Only the waits that exs(7) names open it,
 * and only if the caller had it enabled: exs_cancel_open/close around a
 * condition wait whose cleanup handler releases that wait's mutex.
 */
int exs_nocancel_enter(void);
void exs_nocancel_leave(int *unused);
#define EXS_NOCANCEL \
	int exs_nocancel_ __attribute__((cleanup(exs_nocancel_leave), unused)) = exs_nocancel_enter()
bool exs_cancel_open(void);
void exs_cancel_close(bool opened);
/* pthread_cond_(timed)wait (deadline NULL: none), a cancellation point if
 * `cancellable` and the caller allows it, `cleanup(arg)` run if cancelled;
 * returns what the wait did (ETIMEDOUT) */
int exs_cond_wait(pthread_cond_t *cond, pthread_mutex_t *m, const struct timespec *deadline,
		  bool cancellable, void (*cleanup)(void *), void *arg);
/* An operation will post to q */
void exs_queue_ref(struct exs_queue *q);
/* An EXS_FD_BUSYPOLL connection's operation will post to q: its adaptive
 * waits spin whole from now on */
void exs_queue_mark_busy(struct exs_queue *q);
void exs_queue_unref(struct exs_queue *q);
/* Set by exs_init: polls every connection's CQ from the calling thread, so
 * a waiting exs_qdequeue need not wait for the progress thread. A spin is
 * BEGIN, ONCE..., END; ARM before a waiter sleeps (every CQ raises its
 * event again), AWAKE when that waiter's wait is over; LOOK when a wait
 * that would have spun found its events there. END and LOOK are called
 * with the queue's lock held: they only count. */
enum { EXS_POLL_BEGIN, EXS_POLL_ONCE, EXS_POLL_END, EXS_POLL_ARM, EXS_POLL_AWAKE, EXS_POLL_LOOK,
       EXS_POLL_IDLE };
extern void (*exs_queue_poll_hook)(int phase);
#define EXS_SPIN_MIN_US 5
#define EXS_SPIN_START_US 50
#define EXS_SPIN_MAX_US 1000 /* the adaptive budget's default ceiling (exs.conf busy_poll_us) */
#define EXS_MAX_BUSY_POLL_US 1000000
/* a busy-polling progress thread steps aside this long while application
 * threads wait (progress.c), up to EXS_QUIET_MAX_MS while they keep waiting */
#define EXS_BUSY_ASIDE_MS 10
#define EXS_SPIN_CLOCK_EVERY 256 /* polls at most between two readings of the clock */
#define EXS_REARM_US 2000 /* quiet this long, the progress thread takes the CQs back */
/* the longest it sleeps while waiters keep polling (progress.c's longer()) */
#define EXS_QUIET_MAX_MS 32
#define EXS_CORK_MSGS 64 /* sends one coalesced chunk holds at most (conn.c's cork_add) */
/* receive buffers a connection posts beyond what the wire protocol asks to
 * keep posted, so that used ones go back in batches of this many (one
 * ibv_post_recv per batch, conn.c's repost) */
#define EXS_RECV_BATCH 8
/* The adaptive wait's next budget after a wait that took `waited_us`. */
unsigned exs_spin_budget(unsigned spin_us, uint64_t waited_us, unsigned ceiling_us);

/* ---- verbs.c: devices and registrations */
struct exs_dev {
	int index;
	int kindex; /* the kernel's index of it (RDMA netlink), or -1 */
	char name[IBV_SYSFS_NAME_MAX];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_device_attr attr;
	uint32_t max_msg_sz;
	unsigned max_chunks; /* writes one message may take */
	uint32_t max_inline; /* the largest max_inline_data its QPs accept */
	struct ibv_cq *guard_cq; /* siw only: see siw_guard() in verbs.c */
	struct exs_scq *scqs; /* the CQs its connections share (cq.c) */
};
/* ---- cq.c: a CQ that connections of one device share */
#define EXS_SCQ_ENTRIES 16384 /* entries of one shared CQ (fewer if the device says so) */
#define EXS_CONN_ID_BITS 28   /* a connection's id in its work requests' wr_id */
struct exs_scq {
	struct ibv_cq *cq;
	struct exs_dev *dev;
	struct exs_scq *next;
	uint32_t cap;	/* entries */
	uint32_t used;	/* reserved by its live connections */
	uint32_t stale; /* reserved by gone ones until it is next polled empty */
	uint32_t nconn;
	bool armed; /* it raises an event on its next completion (exs_g.lock) */
	uint64_t n_polls, n_arms; /* cost accounting (EXS_DEBUG) */
};
/* room for `need` completions in a CQ of d's (a new one if none has it) */
struct exs_scq *exs_cq_reserve(struct exs_dev *d, uint32_t need, int *ret_err);
/* give it back; `stale`: completions of the connection may still be in it;
 * `locked`: exs_g.lock is held (an emptied CQ may go) */
void exs_cq_release(struct exs_scq *q, uint32_t need, bool stale, bool locked);
void exs_cq_drained(struct exs_scq *q);
struct exs_scq *exs_cq_of(struct exs_dev *d, struct ibv_cq *cq);
void exs_cq_arm(struct exs_scq *q);
void exs_cq_disarmed(struct exs_scq *q);
int exs_cq_poll(struct exs_scq *q, int n, struct ibv_wc *wc);
/* ids that name an object until freed, then nothing (0: out of ids) */
uint32_t exs_cq_id_new(void *obj, int *ret_err);
void *exs_cq_id_get(uint32_t id);
void exs_cq_id_free(uint32_t id);
struct exs_mreg {
	exs_mhandle_t h; /* the handle of its current life */
	uint32_t idx;    /* its slot */
	char *addr;
	size_t len;
	int flags;
	unsigned refs;
	struct ibv_mr *mr[EXS_MAX_DEVS];
};
struct exs_dev *exs_dev_get(const char *name, int *ret_err);
struct exs_mreg *exs_mreg_new(void *addr, size_t len, int flags);
/* The live registration a handle names, or NULL (exs_g.lock held, so that
 * it cannot be deregistered while the caller uses it). */
struct exs_mreg *exs_mreg_get(exs_mhandle_t h);
int exs_mreg_delete(struct exs_mreg *m);
int exs_mreg_modify(struct exs_mreg *m, size_t len, int flags);
/* The registration mh names if it covers [p, p + len) for this kind of
 * call (NULL for EXS_MHANDLE_UNREGISTERED), else -EINVAL (lock held). */
int exs_mreg_covering(exs_mhandle_t mh, const char *p, size_t len, int kind,
		      struct exs_mreg **ret_m);
struct ibv_mr *exs_mreg_mr(struct exs_mreg *m, struct exs_dev *d);
/* A device's tables of objects; a refusal (errno err) of one of them, as
 * the errno to report: ENOBUFS if that table is full, else err */
enum exs_dev_table { EXS_TAB_PD, EXS_TAB_CQ, EXS_TAB_QP, EXS_TAB_MR };
int exs_dev_refused(const struct exs_dev *d, enum exs_dev_table t, int err);
/* ibv_create_qp (on d's PD), ibv_create_cq, ibv_reg_mr (on d's PD): NULL
 * with errno set as exs_dev_refused says */
struct ibv_qp *exs_verbs_create_qp(struct exs_dev *d, struct ibv_qp_init_attr *qa);
struct ibv_cq *exs_verbs_create_cq(struct exs_dev *d, int n, void *ctx,
				   struct ibv_comp_channel *chan);
struct ibv_mr *exs_verbs_reg_mr(struct exs_dev *d, void *addr, size_t len, int access);
int exs_verbs_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, bool guard);
int exs_verbs_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, bool guard);
void exs_verbs_destroy_qp(struct ibv_qp *qp, bool guard);
/* SIGPIPE held off the calling thread around a call that may raise it */
struct exs_nopipe {
	sigset_t pipe, old;
	bool ignored; /* the application ignores SIGPIPE: nothing to guard */
	bool was_blocked, was_pending;
};
void exs_nopipe_begin(struct exs_nopipe *g);
void exs_nopipe_end(struct exs_nopipe *g);
int exs_verbs_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr);

/* ---- zone.c: pages registered once that unregistered sends and
 * receives of up to EXS_ZONE_MAX bytes are copied through */
#define EXS_ZONE_PAGE 4096
#define EXS_ZONE_PAGES 64 /* a zone: 256 KiB, made at its first use */
#define EXS_ZONE_MAX (16 * EXS_ZONE_PAGE)
struct exs_zone {
	char *mem;
	struct ibv_mr *mr;
	uint64_t used; /* a bit per page */
	bool failed;   /* could not be made: never tried again */
};
/* a run of pages for n bytes (the zone made with `access` if it is not
 * yet): its first page, or -1 (too long, full, or no zone) */
int exs_zone_take(struct exs_zone *z, struct exs_dev *d, size_t n, int access);
char *exs_zone_addr(const struct exs_zone *z, int page);
void exs_zone_give(struct exs_zone *z, int page, size_t n);
void exs_zone_free(struct exs_zone *z);

/* ---- conn.c: one established connection, its state machine and data path */
/* One element of an exs_sendmsg/exs_recvmsg iovec. A send's element is
 * gathered by the device (its own lkey); a receive's is where the bounce
 * buffer is scattered to when the receive completes. */
struct exs_seg {
	char *addr;
	size_t len;
	struct exs_mreg *mreg;	/* explicit registration (ref held), or NULL */
	struct ibv_mr *tmp_mr;	/* implicit registration of this call (send) */
	uint32_t lkey;
};
struct exs_op {
	int kind; /* EXS_EVT_SEND / EXS_EVT_RECV */
	int flags;
	struct exs_queue *q;
	/* the caller holds a reference to q (exs_queue_hold) that becomes the
	 * op's when it starts: conn.c takes no second one, and the caller
	 * lets go of it only when exs_conn_send/recv fail */
	bool q_held;
	exs_ahandle_t ah;
	char *buf;
	size_t len;
	size_t done; /* bytes placed so far (send), or received (recv) */
	exs_mhandle_t user_mh;
	struct exs_mreg *mreg;  /* explicit registration (ref held) */
	struct ibv_mr *tmp_mr;  /* implicit registration of this call */
	char *lbuf; /* what the device reads or writes; a receive's data
		     * goes here, and from a copy zone to buf at its end */
	int zpage;  /* 1 + its first page in its connection's copy zone, or 0 */
	uint32_t lkey, rkey;
	bool has_mem; /* lkey/rkey are set (a quiet receive gets them on RTS) */
	bool advertised; /* receive: its ADVERT went out */
	bool rts; /* send: its RTS went out */
	uint32_t seq; /* SEQPACKET receive: its number (proto/exs_wire.h part 3) */
	bool cancelling; /* receive: exs_cancel wants it gone once the peer lets go */
	uint16_t e_mark; /* send: its EAGER SEND was the e_mark-th (eager_sig) */
	bool sendfile; /* send: one of exs_sendfile's windows (sendfile.c) */
	/* persistent transfers (proto/exs_wire.h part 6) */
	struct ibv_mr *pmr; /* EXS_PERSISTENT: the block's own MR, remote read or write */
	bool at_off;	    /* exs_send_offset/exs_recv_offset: at roff of the peer's block */
	uint64_t roff;
	bool reading;	    /* receive: its RDMA READ of the peer's block is out */
	bool pwrite;	    /* send: written into the peer's persistent receive */
	/* exs_sendmsg/exs_recvmsg: the msghdr its event names (as its buffer),
	 * and nseg > 1 elements (exs_conn_segs_new); a receive's buf is then a
	 * bounce buffer. conn.c frees both when it completes the op; when it
	 * refuses one (an error return) it holds nothing of it and the caller
	 * frees them (exs_conn_segs_free). */
	const struct msghdr *msg;
	struct exs_seg *seg;
	uint32_t nseg;
};
/* Give op (kind and len set) a copy of n elements and, for a receive, a
 * bounce buffer of len bytes on pages of its own (a registered page must
 * not hold the allocator's data: guide §11.3.2). 0 or -ENOMEM. */
int exs_conn_segs_new(struct exs_op *op, const struct exs_seg *seg, uint32_t n);
void exs_conn_segs_free(struct exs_op *op);

/* The send direction: what may still go to the peer. */
enum exs_tx_state {
	EXS_TX_OPEN,	   /* sends are taken */
	EXS_TX_REFUSED,	   /* the peer shut its read side: sends fail with EPIPE */
	EXS_TX_SHUTTING,   /* SHUT_WR or close: the FIN follows the started sends */
	EXS_TX_FIN_SENT,   /* FIN posted, its completion pending */
	EXS_TX_ABORT_SENT, /* ABORT posted (abortive close), its completion pending */
	EXS_TX_DONE,	   /* FIN or ABORT completed, failed, or given up on */
};
/* The receive direction: what may still come from the peer. */
enum exs_rx_state {
	EXS_RX_OPEN,
	EXS_RX_SHUT,	  /* our SHUT_RD: RDSHUT sent, its ack pending */
	EXS_RX_SHUT_DONE, /* RDSHUT acked, or the peer's FIN came first */
	EXS_RX_EOF,	  /* the peer's FIN */
};
/* The connection as a whole. */
enum exs_link_state {
	EXS_LINK_SETUP,	  /* built, not established: what arrives waits in the CQ */
	EXS_LINK_UP,
	EXS_LINK_PROBING, /* exsd lost the CM connection: a PING is out */
	EXS_LINK_RESET,	  /* broken or aborted: nothing more is taken from the peer */
};
/* exs_cancel of an advertised receive (proto/exs_wire.h UNADVERT): one at
 * a time, the others wait with op->cancelling set. */
enum exs_unadv_state {
	EXS_UNADV_NONE,
	EXS_UNADV_ASKED,  /* UNADVERT out for unadv_slot, its receive waiting */
	EXS_UNADV_FILLED, /* that receive completed meanwhile: the slot waits for the ACK */
};

/* Persistent transfers (proto/exs_wire.h part 6): each of the four that a
 * connection may have, ours and the peer's, one per direction each. */
enum exs_pst_state {
	EXS_PST_NONE,
	EXS_PST_ACTIVE, /* in effect (ours: PERSIST sent; the peer's: PERSIST came) */
	EXS_PST_ENDING, /* ours: UNPERSIST sent, its ACK pending; the peer's send:
			 * UNPERSIST came, our READs drain before the ACK */
};
enum { EXS_PST_OWN_SEND, EXS_PST_OWN_RECV, EXS_PST_PEER_SEND, EXS_PST_PEER_RECV, EXS_PST_N };

struct exs_conn {
	int fd;	  /* the socket its events name */
	bool seq; /* SOCK_SEQPACKET: one send fills one receive */
	struct exs_dev *dev;
	uint32_t id;	     /* in its work requests' wr_id (cq.c) */
	uint32_t owner;	     /* the id of the socket that adopted it; 0: a spare */
	struct exs_scq *scq; /* the CQ it shares */
	uint32_t cq_need;    /* the room it holds there */
	struct ibv_qp *qp;
	/* completions taken from the shared CQ while it was still being set
	 * up: they wait for exs_conn_establish (ring of nsend + nrecv) */
	struct ibv_wc *stash;
	uint32_t nstash;
	bool touched;			/* on the list exs_conn_touched() empties */
	struct exs_conn *touched_next;
	bool iwarp;
	uint32_t max_sge; /* SGEs one RDMA write of its QP gathers (EXS_F_GETSGEMAX) */
	uint32_t max_writes; /* writes one placement may take: chunks and gathers */
	bool busy_poll; /* EXS_FD_BUSYPOLL: the progress thread polls its CQ */
	uint32_t inline_max; /* §7.3: sends up to this many bytes go inline */
	enum exs_tx_state tx;
	int abort_err; /* what an abort's operations end with; 0: ECONNABORTED */
	enum exs_rx_state rx;
	enum exs_link_state link;
	enum exs_unadv_state unadv;
	uint32_t unadv_slot;
	uint32_t alloc;	  /* resources sized for this many credits */
	uint32_t credits; /* negotiated */
	/* one registered block: nrecv receive buffers of rsz bytes, nsend
	 * control message send slots, alloc eager send buffers of esz bytes */
	char *mem; /* mmap'd: pages of its own */
	size_t mem_len;
	struct ibv_mr *mem_mr;
	char *rbuf, *ebuf;
	struct exs_wire_msg *msg;
	uint32_t nrecv, nsend, rsz, esz;
	/* used receive buffers not posted again yet: at most
	 * EXS_RECV_BATCH - 1, the extra ones nrecv holds */
	uint32_t repost[EXS_RECV_BATCH], nrepost;
	/* control send slots, used in ring order: ctl_head is the oldest
	 * not known complete; a signalled one's completion frees it and every
	 * unsignalled one before it (a send queue completes in order) */
	uint32_t ctl_head, nctl_free, ctl_unsig;
	/* data WRs (RDMA WRITE, READ) have dq_max entries of the send queue:
	 * posted, known done, and posted up to the last signalled one, all
	 * counted modulo 2^16 (conn.c's post_send); dq_wait: a send or READ
	 * waits for room */
	uint16_t dq_posted, dq_done, dq_signalled;
	uint32_t dq_max;
	bool dq_wait;
	int32_t *ctl_op; /* send slot -> send op it completes, or -1 */
	/* passive iWARP: send slots held, in order, until the peer's HELLO */
	bool await_hello;
	uint32_t *held;
	uint32_t nheld;
	/* receive operations, indexed by advert slot */
	struct exs_op *rop;
	uint32_t *rfree;
	uint32_t nrfree;
	/* send operations and the FIFOs that match them with adverts */
	struct exs_op *sop;
	uint32_t *sfree;
	uint32_t nsfree;
	uint32_t *sfifo;
	uint32_t sf_head, sf_count;
	struct exs_wire_msg *ads;
	uint32_t ad_head, ad_count;
	/* §7.2 small messages, SOCK_SEQPACKET (proto/exs_wire.h part 3) */
	uint32_t sp_cap;  /* the largest our buffers take (what we offered) */
	uint32_t sp_max;  /* negotiated; 0: none */
	uint32_t tx_msn;  /* messages sent or placed */
	uint32_t rx_rsn;  /* receives posted */
	uint32_t rx_msn;  /* messages arrived */
	uint32_t *rfifo;  /* posted receives still without data, oldest first */
	uint32_t rf_head, rf_count;
	char *pool;	  /* messages that came before their receive */
	uint32_t *pool_len;
	uint32_t pool_head, pool_count;
	bool rts_pending; /* the peer's RTS for receive rts_seq, not posted yet */
	uint32_t rts_seq;
	/* §7.6 stream buffer, SOCK_STREAM (proto/exs_wire.h part 4): the
	 * receive buffers and pool above, filled by EAGER chunks */
	uint32_t sb_chunk; /* bytes per chunk in effect; 0: no stream buffer */
	uint32_t pool_off; /* bytes of the first pool entry already read */
	uint32_t e_tx, e_rx; /* chunks sent, chunks arrived (adverts carry e_rx) */
	uint32_t e_next;   /* the next eager send buffer, round the ring (< alloc) */
	bool readvertise;  /* advertise_waiting ran short of control slots */
	bool ad_wanted;	   /* receiver: the peer's RTS asks for adverts (until its next chunk) */
	bool rts_out;	   /* sender: our RTS went out, no chunk since */
	uint32_t ecredits; /* EAGER messages the peer has room for */
	uint32_t owed;	   /* eager credits to give back */
	/* EAGER SENDs posted; known done (the send queue completes in order,
	 * and a signalled one's completion says how many had been posted with
	 * it); posted up to the last signalled one (eager_sig) */
	uint16_t e_posted, e_done, e_signalled;
	/* the open chunk (send-side coalescing, conn.c's cork_add): ck_len
	 * bytes of ck_msgs sends in eager buffer e_next, not posted yet, on
	 * conn.c's corked list (ck_next) while ck_len != 0; nodelay
	 * (EXS_FD_NODELAY) never opens one; send_gen: exs_g.idle_gen at the
	 * last send, streaming: unchanged since the one before */
	uint32_t ck_len, ck_msgs;
	struct exs_conn *ck_next;
	bool nodelay, streaming;
	unsigned send_gen;
	/* persistent transfers (part 6) */
	enum exs_pst_state pst[EXS_PST_N];
	uint32_t pst_op[2];	  /* own send / receive: its op slot */
	bool pst_refused[2];	  /* own send / receive: the peer's REFUSE came while ENDING */
	struct exs_wire_msg blk[2]; /* the peer's PERSIST: its send's block, its receive's */
	uint32_t reads_out;	  /* our READs of the peer's block in flight */
	uint32_t rd_left;	  /* its UNPERSIST came: waiting receives still to be read */
	uint32_t rd_unacked;	  /* READ_DONEs sent, not credited back */
	uint32_t rd_owed;	  /* READ_DONEs received, not credited back */
	uint64_t probe_deadline_ms;
	uint64_t bytes_sent, bytes_rcvd, sends, recvs, errors; /* for exsctl */
	/* the cost accounting EXS_DEBUG prints when the connection goes:
	 * work requests posted, how many asked for a completion, completions
	 * taken; polls (empty ones too) and re-arms of its shared CQ while it
	 * lived, from these starting values; sends or READs that waited for
	 * room in the send queue (dq_room) */
	uint64_t n_send_wr, n_signalled, n_recv_wr, n_cqe, n_polls0, n_arms0, n_dq_waits;
	uint64_t n_corked; /* sends that went in an open chunk */
	uint64_t n_zoned;  /* unregistered operations copied through a zone */
	struct exs_zone zone[2]; /* copy zones: sends', receives' (zone.c) */
};
/* what a socket asks of its connection */
struct exs_conn_cfg {
	uint32_t credits;
	uint32_t sp_max; /* SOCK_SEQPACKET small messages offered (§7.2) */
	uint32_t stream_buf; /* SOCK_STREAM buffer offered (§7.6) */
	int64_t inline_max; /* <0: the device's largest */
	bool busy_poll;
	bool nodelay; /* EXS_FD_NODELAY: no send-side coalescing */
};
int exs_conn_create(int fd, int type, const char *dev, bool iwarp, const struct exs_conn_cfg *cfg,
		    uint32_t owner, struct exs_conn **ret_conn);
/* exs_conn_create in two steps: build on a device (no lock needed; the
 * connection belongs to no socket: fd -1, its CQ reports to nobody), then
 * a socket adopts it (exs_g.lock held). */
int exs_conn_build(struct exs_dev *dev, int type, bool iwarp, const struct exs_conn_cfg *cfg,
		   struct exs_conn **ret_conn);
void exs_conn_adopt(struct exs_conn *c, int fd, uint32_t owner, const struct exs_conn_cfg *cfg);
/* spare.c: connections built before they are needed (exs_conn_create's
 * arguments and result) */
int exs_spare_take(int fd, int type, const char *dev, bool iwarp, const struct exs_conn_cfg *cfg,
		   uint32_t owner, struct exs_conn **ret_conn);
/* the route a connect of this type got on `dev`: its port and INIT
 * attributes, kept for exs_spare_take_early */
void exs_spare_routed(int type, const char *dev, uint32_t port, const ExsCtl__QpAttr *init);
/* before a connect's route is known: the spare ready on the device of the
 * latest route of this type and configuration, with that route's port and
 * INIT attributes (not yet applied); -ENOENT when there is none */
int exs_spare_take_early(int fd, int type, const struct exs_conn_cfg *cfg, uint32_t owner,
			 struct exs_conn **ret_conn, uint32_t *port, ExsCtl__QpAttr *init);
void exs_conn_destroy(struct exs_conn *c);
int exs_conn_modify(struct exs_conn *c, const ExsCtl__QpAttr *a);
void exs_conn_await_hello(struct exs_conn *c);
int exs_conn_establish(struct exs_conn *c, uint32_t credits, uint32_t sp_max, uint32_t stream_buf,
		       bool active);
uint32_t exs_conn_stream_buf(const struct exs_conn *c);
/* send-side coalescing (conn.c's cork_add): EXS_FD_NODELAY on or off (on:
 * the open chunk goes now); every open chunk goes now (exs_g.lock) */
void exs_conn_set_nodelay(struct exs_conn *c, bool on);
void exs_conn_uncork_all(void);
int exs_conn_send(struct exs_conn *c, const struct exs_op *tmpl);
int exs_conn_recv(struct exs_conn *c, const struct exs_op *tmpl);
/* Completions: poll c's shared CQ (c counts as touched), every device's
 * CQs, or one; each connection with completions goes on the touched list,
 * which exs_conn_touched() empties; exs_conn_progress then does what they
 * leave to do (adverts, credits, FIN). */
void exs_conn_poll(struct exs_conn *c);
void exs_conn_poll_all(void);
void exs_conn_poll_cq(struct exs_scq *q);
struct exs_conn *exs_conn_touched(void);
void exs_conn_progress(struct exs_conn *c);
/* arm every disarmed shared CQ (true if one was) */
bool exs_conn_arm_all(void);
void exs_conn_shut_wr(struct exs_conn *c);
void exs_conn_shut_rd(struct exs_conn *c);
void exs_conn_abort(struct exs_conn *c);
void exs_conn_break(struct exs_conn *c, int err);
/* how exsd lost a connection's CM endpoint (exs_conn_cm_lost) */
enum exs_cm_loss {
	EXS_CM_LOST,	  /* a CM disconnect, or exsd went away: ask the peer */
	EXS_CM_ABORTED,	  /* exsctl disconnect: tell the peer (ABORT), end */
	EXS_CM_PEER_GONE, /* the peer's process died (same host): end now */
};
void exs_conn_cm_lost(struct exs_conn *c, enum exs_cm_loss why);
void exs_conn_tick(struct exs_conn *c, uint64_t now_ms);
void exs_conn_give_up(struct exs_conn *c);
void exs_conn_fail_all(struct exs_conn *c, int err);
bool exs_conn_wr_done(const struct exs_conn *c);
bool exs_conn_rd_done(const struct exs_conn *c);
bool exs_conn_reset_before_eof(const struct exs_conn *c);
bool exs_conn_finished(const struct exs_conn *c);
bool exs_conn_send_ready(const struct exs_conn *c);
bool exs_conn_recv_ready(const struct exs_conn *c);
void exs_conn_stats(const struct exs_conn *c, ExsCtl__SockStats *x);
/* exs_cancel: EXS_CANCEL_RECV / _SEND operations with ahandle `ah` */
int exs_conn_cancel(struct exs_conn *c, exs_ahandle_t ah, int what);
/* close: our persistent send and receive end (UNPERSIST) */
void exs_conn_unpersist_all(struct exs_conn *c);

/* ---- sock.c: the fd table and each socket's life cycle */
enum exs_sock_state {
	EXS_S_FREE,
	EXS_S_NEW,
	EXS_S_BOUND,
	EXS_S_LISTENING,
	EXS_S_CONNECTING,
	EXS_S_ACCEPTING, /* passive side, set up on behalf of a listener */
	EXS_S_CONNECTED,
	EXS_S_CLOSING,
};
const char *exs_sock_state_name(enum exs_sock_state s);

struct exs_accept_slot {
	struct exs_acceptaddr aa;
	struct exs_queue *q; /* NULL: a blocking accept waiting on `done` */
	int *ret_fd;
	struct sockaddr_storage *ret_addr;
	socklen_t *ret_len;
	bool done;
	int err;
};
struct exs_sock {
	int fd;
	uint32_t id; /* what exsd calls it: fd | generation << 16 */
	enum exs_sock_state state;
	struct exs_sock *next, *prev; /* exs_g.sock_list: every socket */
	int domain, type;
	uint32_t cfg_credits, cfg_sp_max, cfg_stream_buf;
	int64_t cfg_inline; /* <0: the device's largest */
	int fd_flags; /* EXS_FD_* */
	bool known_to_exsd;
	bool early; /* connecting: conn is the QP offered in Connect.early */
	/* a call to exsd is in flight (the lock is released while it waits):
	 * a close meanwhile is deferred until it returns */
	unsigned busy;
	bool close_deferred;
	int close_flags;
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	/* listener */
	uint32_t backlog;
	ExsCtl__Msg **reqs; /* pending connection requests, FIFO */
	uint32_t req_head, req_count;
	struct exs_accept_slot *acc; /* pending accepts, FIFO (cap EXS_MAX_BACKLOG) */
	uint32_t acc_head, acc_count, acc_cap;
	/* exsd went away: the listener or connection waits to be made known
	 * to the next exsd (broker.c, exs-rejoin); listen_err: the next exsd
	 * refused the listener, and why */
	bool rejoin;
	int listen_err;
	/* passive connection: who accepted it */
	int listener_fd;
	uint32_t listener_id;
	struct exs_accept_slot accepted_by;
	/* active connection */
	struct exs_queue *op_q;
	exs_ahandle_t op_ah;
	/* close */
	uint64_t close_deadline_ms;
	bool fin_deadline_set;
	struct exs_queue *close_q;
	exs_ahandle_t close_ah;
	/* exs_shutdown (guide §4.5): at most one outstanding per direction */
	struct exs_shut_op {
		struct exs_queue *q;
		exs_ahandle_t ah;
		int dirs; /* EXS_DIR_*; 0: slot unused */
	} shut[2];
	int shut_started, shut_done; /* EXS_DIR_* */
	/* an exs_sendfile runs: other sends wait (EBUSY) so the stream keeps
	 * the order of the calls */
	bool sendfile;
	struct exs_conn *conn;
};
#define EXS_DIR_RD 1
#define EXS_DIR_WR 2

struct exs_sock *exs_sock_get(int fd);
struct exs_sock *exs_sock_by_id(uint32_t id);
struct exs_sock *exs_sock_alloc(int domain, int type);
void exs_sock_free(struct exs_sock *s);
void exs_sock_set_state(struct exs_sock *s, enum exs_sock_state st);
void exs_sock_post(struct exs_queue *q, int fd, int type, exs_ahandle_t ah, int err);
void exs_sock_tell_exsd_close(struct exs_sock *s);
void exs_sock_reject(uint32_t req, int err);
void exs_sock_connect_failed(struct exs_sock *s, int err);
void exs_sock_fail_accepts(struct exs_sock *s, int err);
void exs_sock_progress(struct exs_sock *s);
void exs_sock_progress_all(void);
void exs_sock_progress_cq(struct exs_scq *q);
void exs_sock_settle(void);
void exs_sock_maybe_finish_close(struct exs_sock *s);
void exs_sock_tick(uint64_t now_ms);
int exs_sock_xfer(struct exs_sock *s, const struct exs_op *op);
int exs_sock_close(struct exs_sock *s, int flags, struct exs_queue *q, exs_ahandle_t ah);
void exs_sock_busy(struct exs_sock *s);
bool exs_sock_unbusy(struct exs_sock *s);
int exs_sock_shutdown(struct exs_sock *s, int dirs, struct exs_queue *q, exs_ahandle_t ah);
int exs_sock_fcntl(struct exs_sock *s, int cmd, int arg);
short exs_sock_poll(struct exs_sock *s, short events);
int exs_sock_cancel(struct exs_sock *s, exs_ahandle_t ah, int what);
void exs_sock_wake_pollers(void);

/* ---- sendfile.c: exs_sendfile's operations */
struct exs_sf;
int exs_sf_new(const struct exs_sendfilevec *v, int cnt, int flags, struct exs_sf **ret_sf);
int exs_sf_begin(struct exs_sf *sf, struct exs_sock *s, struct exs_queue *q, exs_ahandle_t ah);
ssize_t exs_sf_start(struct exs_sf *sf);
void exs_sf_free(struct exs_sf *sf);

/* ---- broker.c: the library's half of the connection set-up that exsd
 * brokers, and what else exsd tells or asks about sockets */
int exs_broker_bind(struct exs_sock *s, const struct sockaddr *a, socklen_t len);
int exs_broker_listen(struct exs_sock *s, int backlog);
int exs_broker_connect(struct exs_sock *s, const struct sockaddr *a, socklen_t len,
		       const struct timeval *tmo, struct exs_queue *q, exs_ahandle_t ah);
int exs_broker_accept(struct exs_sock *s, struct exs_accept_slot *slots, int n);
void exs_broker_input(ExsCtl__Msg *m); /* an event or request from exsd; takes m */
void exs_broker_ctl_lost(void);

/* ---- ctl.c: the channel to exsd */
int exs_ctl_ensure(void);
int exs_ctl_call(ExsCtl__Msg *req, ExsCtl__Msg **ret_reply);
int exs_ctl_send(ExsCtl__Msg *m);
int exs_ctl_take(int fd, const uint8_t *buf, ssize_t n, ExsCtl__Msg **ret_msg);
void exs_ctl_msg_init(ExsCtl__Msg *m);
/* `err` from exsd (or a peer's reject it passes on) if it is an errno
 * exsd is documented to give, else `fallback` */
int exs_ctl_errno(int err, int fallback);

/* ---- progress.c: the progress thread */
int exs_progress_start(void);
void exs_progress_poll(int phase);
/* Lock held: the calling thread is about to wait, or found nothing to
 * take: a send after this is not coalesced, and every open chunk goes. */
void exs_progress_idle(void);
void exs_progress_wake(void);
uint64_t exs_now_ms(void);
int exs_progress_add_fd(int fd, void *tag);
void exs_progress_del_fd(int fd);
int exs_progress_pin(int cpu);
void exs_progress_arm(void);

/* EXS_DEBUG set: state changes are written to stderr ("from -> to") */
void exs_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define EXS_DEBUG_ON() __builtin_expect(exs_g.debug, 0)

struct exs_global {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* any state change a blocked caller may wait for */
	bool inited;
	bool debug; /* EXS_DEBUG */
	int epfd, wakefd;
	unsigned nclosing; /* sockets in EXS_S_CLOSING: the progress thread ticks */
	unsigned nprobing; /* connections waiting for a PONG: it ticks too */
	unsigned nbusypoll; /* EXS_FD_BUSYPOLL connections: it never sleeps */
	/* application threads polling the CQs in a wait (EXS_POLL_*): while
	 * one does, or one came to a wait within about EXS_REARM_US (spin_gen
	 * counts the spins begun, looks the waits that found their events
	 * there), a CQ's event is not re-armed (its next
	 * completions would only wake the progress thread for nothing, and
	 * between two waits of a ping-pong nobody polls for a moment).
	 * ndisarmed such CQs are re-armed by a waiter before it sleeps
	 * (sleepers: waiters that did and sleep; while one does, the progress
	 * thread re-arms a CQ whose event it took), or by the progress thread
	 * once nobody has begun to poll since its last check (checks
	 * EXS_REARM_US after, then twice as far apart up to EXS_QUIET_MAX_MS) */
	unsigned spinners, ndisarmed, spin_gen;
	unsigned sleepers; /* changed and read atomically, never under the lock */
	/* waits that would have spun but found their events there (LOOK);
	 * with spin_gen and spinners, read by the progress thread without
	 * the lock (busy polling, re-arming): all three change atomically */
	unsigned looks;
	unsigned pollers; /* threads waiting in exs_poll: progress wakes them */
	/* threads asleep on cond (exs_g_wait, ctl.c's reply wait; lock held):
	 * an operation's end wakes them only when there are (exs_g_wake) */
	unsigned cond_waiters;
	/* waits that application threads came to, or that found nothing to
	 * take (exs_progress_idle); connections with an open chunk (conn.c's
	 * cork_add): both changed and read atomically */
	unsigned idle_gen, ncorked;
	/* the progress thread sleeps with no tick within a millisecond: a
	 * chunk that opens wakes it (changed and read atomically) */
	bool deaf;
	/* nclosing, nprobing, nbusypoll and ndisarmed are read without the
	 * lock by the progress thread: change them only through EXS_COUNT */
	int comp_cpu; /* EXS_F_SETCOMPTHREADCPU; INT_MAX: not pinned */
	bool ctl_lost; /* the channel dropped: the progress thread tells broker.c */
	bool rejoining; /* the exs-rejoin thread runs (broker.c) */
	bool ctl_adopt; /* this exsd takes Adopt (HelloReply.adopt) */
	bool ctl_early; /* this exsd takes Connect.early (HelloReply.early) */
	pthread_t thread;
	int ctl_fd;
	uint32_t ctl_seq;
	const char *ctl_path;
	/* fd -> socket; free fds in a two-level bitmap (bit set = free) */
	struct exs_sock **socks;
	uint64_t *fd_free, fd_free_sum[EXS_MAX_SOCKETS / 64 / 64];
	struct exs_sock *sock_list; /* every socket */
	struct exs_dev *devs[EXS_MAX_DEVS];
	int ndevs;
	/* what a new socket starts with: built in, then exsd's (HelloReply) */
	struct exs_defaults {
		uint32_t credits, sp_max;
		uint32_t inline_max, stream_buffer, busy_poll_us;
	} defaults;
};
extern struct exs_global exs_g;

/* exs_g.lock held: wait on exs_g.cond, counted in cond_waiters (the rest
 * as exs_cond_wait) */
int exs_g_wait(const struct timespec *deadline, bool cancellable, void (*cleanup)(void *),
	       void *arg);
/* exs_g.lock held: wake the threads waiting on exs_g.cond, if any */
static inline void exs_g_wake(void)
{
	if (exs_g.cond_waiters)
		pthread_cond_broadcast(&exs_g.cond);
}

#endif
