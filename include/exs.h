/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exs.h - the Extended Sockets API (ES-API) as extended by UNH-EXS 1.4.0.
 *
 * Names, types, flags and semantics follow "Overview of UNH EXS 1.4.0 for
 * Programmers". Every call returns -1 (or EXS_QHANDLE_INVALID /
 * EXS_MHANDLE_INVALID) and sets errno on failure. The manual is exs(7)
 * (the model, errors, threads, fork, limits) and a page per call, e.g.
 * exs_send(3), written in markdown in docs/man. They say what this
 * implementation chose where the guide is silent.
 */
#ifndef EXS_H
#define EXS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <poll.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EXS_VERSION1 1
#define EXS_VERSION EXS_VERSION1

/*
 * Queue and registration handles have a pointer type but are opaque values,
 * never addresses: 0 is never valid, and the handle of a deleted queue or a
 * deregistered region stays invalid for the life of the process (EINVAL),
 * even when the library reuses its memory for a later exs_qcreate or
 * exs_mregister, which get new handles.
 *
 * Socket descriptors are reused like POSIX fds (the lowest free number), but
 * only once the close has completed: every operation of the old socket has
 * ended and posted its event (those still running end with ECONNABORTED),
 * then EXS_EVT_CLOSE is posted, and only then may exs_socket or an accept
 * return the same number. Events of the old socket that are still waiting in
 * a queue stay there and carry the old number in exs_evt_socket; in one
 * queue they all come before the new socket's, in different queues nothing
 * orders them, so tell them apart by exs_evt_ahandle (or drain the old
 * socket's events, up to its EXS_EVT_CLOSE, before using the number again).
 */
typedef struct exs_qhandle_opaque *exs_qhandle_t;
typedef struct exs_mhandle_opaque *exs_mhandle_t;
typedef void *exs_ahandle_t;

#define EXS_QHANDLE_INVALID ((exs_qhandle_t)0)
#define EXS_MHANDLE_INVALID ((exs_mhandle_t)0)
#define EXS_MHANDLE_UNREGISTERED ((exs_mhandle_t)(~(unsigned long)0))

/* exs_evt_type */
#define EXS_EVT_ACCEPT 1
#define EXS_EVT_CLOSE 2
#define EXS_EVT_CONNECT 3
#define EXS_EVT_RECV 4
#define EXS_EVT_SEND 5
#define EXS_EVT_SHUTDOWN 6
#define EXS_EVT_SENDFILE 7

/* operation flags; they never collide with MSG_WAITALL */
#define EXS_BLOCK 0x01000000
#define EXS_DONTLINGER 0x02000000
#define EXS_CREDIT_WAIT 0x04000000
#define EXS_DONTWAIT 0x08000000
#define EXS_UNSIGNALED 0x10000000
#define EXS_UNSIGNALLED EXS_UNSIGNALED
/* persistent transfers (exs_send(3), exs_send_offset(3), exs(7)):
 * SOCK_SEQPACKET only; a persistent send's block stays readable by the
 * peer's receives, a persistent receive's buffer writable by the peer's
 * sends, until exs_cancel or close (event errno ECANCELED). With
 * EXS_READ_NOTIFY a persistent send also reports every read of the peer:
 * EXS_EVT_SEND, errno 0, length = bytes read, the send still in effect. */
#define EXS_PERSISTENT 0x20000000
#define EXS_READ_NOTIFY 0x40000000

/* exs_cancel flags: the kinds of operation to cancel; 0 means any */
#define EXS_CANCEL_RECV 0x1
#define EXS_CANCEL_SEND 0x2
#define EXS_CANCEL_ACCEPT 0x4
#define EXS_CANCEL_CONNECT 0x8
#define EXS_CANCEL_ANY (EXS_CANCEL_RECV | EXS_CANCEL_SEND | EXS_CANCEL_ACCEPT | EXS_CANCEL_CONNECT)

/* exs_mregister flags */
#define EXS_MRF_RECV_DISABLE 0x1
/* each receive into the region, when advertised, exposes its own buffer
 * alone, until it completes; without it adverts lend the region's key and
 * a peer may write anywhere in the region while its connection lasts
 * (exs(7)) */
#define EXS_MRF_ADVERT_ONLY 0x2
#ifndef EXS_DISABLE_DEPRECATED
/* deprecated since UNH EXS 1.3.6 (guide §11.2.5); accepted and ignored */
#define EXS_LOCAL_READ 0x10
#define EXS_LOCAL_WRITE 0x20
#define EXS_REMOTE_READ 0x40
#define EXS_REMOTE_WRITE 0x80
#define EXS_ACCESS_ALL (EXS_LOCAL_READ | EXS_LOCAL_WRITE | EXS_REMOTE_READ | EXS_REMOTE_WRITE)
#endif

/* exs_qmodify / exs_qstatus attributes (guide §11.2.7-11.2.8) */
#define EXS_QATTR_SIGNAL 1 /* int: signal raised when an event is posted, 0 none */
#define EXS_QATTR_EVENTS 2 /* int: qstatus: events waiting; qmodify: depth */
#define EXS_QATTR_WAIT 3 /* int: EXS_WAIT_*; settable only before first use */
#define EXS_WAIT_ADAPTIVE 0
#define EXS_WAIT_BUSY_POLL 1
#define EXS_WAIT_NOTIFY 2

/* exs_shutdown directions are SHUT_RD, SHUT_WR, SHUT_RDWR from <sys/socket.h> */

/* exs_fcntl commands (guide §7) */
#define EXS_F_GETFD 1
#define EXS_F_SETFD 2
#define EXS_F_GETFLOWCONTROLCREDITS 10
#define EXS_F_SETFLOWCONTROLCREDITS 11
#define EXS_F_GETSPMAXSIZE 12
#define EXS_F_SETSPMAXSIZE 13
#define EXS_F_GETINLINEMAXSIZE 14 /* §7.3: before connect the wish, after it what the device took */
#define EXS_F_SETINLINEMAXSIZE 15 /* before connect/accept; lowered silently to the device's limit */
#define EXS_F_SETCOMPTHREADCPU 16 /* §7.4: CPU of the completion thread, INT_MAX = not pinned */
#define EXS_F_GETSTREAMBUFSIZE 17 /* §7.6: SOCK_STREAM intermediate receive buffer */
#define EXS_F_SETSTREAMBUFSIZE 18
#define EXS_F_GETSGEMAX 19 /* connected: local segments one RDMA write gathers (exs_sendmsg(3)) */
/* EXS_F_GETFD / EXS_F_SETFD flags (§7.5, §7.6) */
#define EXS_FD_BUSYPOLL 0x1 /* the completion thread polls this connection without sleeping */
#define EXS_FD_NODELAY 0x2  /* no intermediate stream buffer (set by EXS_F_SETSTREAMBUFSIZE 0) */

typedef struct exs_event {
	int exs_evt_errno;
	int exs_evt_socket;
	exs_ahandle_t exs_evt_ahandle;
	int exs_evt_type;
	union {
		struct exs_evt_xfer {
			void *exs_evt_buffer;
			exs_mhandle_t exs_evt_mhandle;
			size_t exs_evt_amount_lost;
			size_t exs_evt_length;
		} exs_evt_xfer;
		struct exs_evt_accept {
			int exs_evt_new_socket;
			struct sockaddr *exs_evt_addr;
			socklen_t exs_evt_addrlen;
		} exs_evt_accept;
	} exs_evt_union;
} exs_event_t;

struct exs_acceptaddr {
	struct sockaddr *exs_addr;
	socklen_t exs_addrlen;
	exs_ahandle_t exs_ahandle;
};

int exs_init(int version);

exs_qhandle_t exs_qcreate(int depth);
int exs_qdelete(exs_qhandle_t qhandle);
int exs_qdequeue(exs_qhandle_t qhandle, exs_event_t *event_vector, int count,
		 struct timeval *timeout);
int exs_qmodify(exs_qhandle_t qhandle, int attr, const void *value);
int exs_qstatus(exs_qhandle_t qhandle, int attr, void *value);
/* an eventfd readable while events wait in the queue; closed by exs_qdelete */
int exs_qfd(exs_qhandle_t qhandle);

exs_mhandle_t exs_mregister(void *address, size_t length, int flags);
int exs_mderegister(exs_mhandle_t mhandle, int flags);
/* a registration's new length (from the same address) and flags */
int exs_mmodify(exs_mhandle_t mhandle, size_t length, int flags);

int exs_socket(int domain, int socket_type, int protocol);
int exs_bind(int fd, const struct sockaddr *address, socklen_t addrlen);
int exs_listen(int fd, int backlog);
int exs_accept(int fd, struct exs_acceptaddr *address_vector, int count,
	       int accept_flags, exs_qhandle_t qhandle);
int exs_blocking_accept(int fd, struct sockaddr *peer_address, socklen_t *peer_addrlen);
int exs_connect(int fd, const struct sockaddr *server_address, socklen_t server_addrlen,
		int connect_flags, struct timeval *timeout, exs_qhandle_t qhandle,
		exs_ahandle_t ahandle);
int exs_blocking_connect(int fd, const struct sockaddr *server_address,
			 socklen_t server_addrlen);
int exs_close(int fd, int close_flags, exs_qhandle_t qhandle, exs_ahandle_t ahandle);
int exs_blocking_close(int fd);
int exs_shutdown(int fd, int how, int shutdown_flags, exs_qhandle_t qhandle,
		 exs_ahandle_t ahandle);

ssize_t exs_send(int fd, const void *send_buffer, size_t send_length, int send_flags,
		 exs_qhandle_t qhandle, exs_ahandle_t ahandle, exs_mhandle_t mhandle);
ssize_t exs_recv(int fd, void *recv_buffer, size_t max_length, int recv_flags,
		 exs_qhandle_t qhandle, exs_ahandle_t ahandle, exs_mhandle_t mhandle);
ssize_t exs_blocking_send(int fd, const void *write_buffer, size_t write_length,
			  int send_flags, exs_mhandle_t mhandle);
ssize_t exs_blocking_recv(int fd, void *read_buffer, size_t max_length, int recv_flags,
			  exs_mhandle_t mhandle);
ssize_t exs_write(int fd, const void *write_buffer, size_t write_length);
ssize_t exs_read(int fd, void *read_buffer, size_t max_length);

/*
 * Scatter/gather (exs_sendmsg(3)): msg_iov has 1..EXS_IOV_MAX elements,
 * mhandles one per element (each a registration covering it, or
 * EXS_MHANDLE_UNREGISTERED; a NULL array: all unregistered). msg_name and
 * msg_control must be unset. The completion's exs_evt_buffer is `msg`.
 */
#define EXS_IOV_MAX 64
ssize_t exs_sendmsg(int fd, const struct msghdr *msg, int send_flags, exs_qhandle_t qhandle,
		    exs_ahandle_t ahandle, const exs_mhandle_t *mhandles);
ssize_t exs_recvmsg(int fd, struct msghdr *msg, int recv_flags, exs_qhandle_t qhandle,
		    exs_ahandle_t ahandle, const exs_mhandle_t *mhandles);

/*
 * exs_sendfile (exs_sendfile(3)): the bytes of 1..EXS_SENDVEC_MAX elements,
 * in order, as one stream of data (SOCK_STREAM only). The names follow the
 * ES-API guide; the layout (after Solaris sendfilev) is this library's.
 * exs_sfv_type says which member of exs_sfv_u is valid; exs_sfv_off is an
 * offset into the file (or into the memory of an exs_iov element) and
 * exs_sfv_len a length of at least 1 byte. The completion is
 * EXS_EVT_SENDFILE, its exs_evt_buffer is `sendvec`.
 */
#define EXS_SENDVEC_MAX 64
#define EXS_SFV_FD 1   /* exs_fd: an open file, read from exs_sfv_off */
#define EXS_SFV_IOV 2  /* exs_iov: memory, registered or not */
#define EXS_SFV_PATH 3 /* exs_pathv: a file the library opens and closes */
union exs_xfvec {
	int exs_fd;
	struct exs_sfv_iov {
		const void *exs_base;
		exs_mhandle_t exs_mhandle; /* covering it, or EXS_MHANDLE_UNREGISTERED */
	} exs_iov;
	const char *exs_pathv;
};
struct exs_sendfilevec {
	int exs_sfv_type;
	union exs_xfvec exs_sfv_u;
	int64_t exs_sfv_off; /* not off_t: the layout must not depend on _FILE_OFFSET_BITS */
	size_t exs_sfv_len;
};
ssize_t exs_sendfile(int fd, const struct exs_sendfilevec *sendvec, int sendvec_cnt,
		     int send_flags, exs_qhandle_t qhandle, exs_ahandle_t ahandle);
/* offsets into the peer's persistent memory (exs_send_offset(3)): a
 * receive of [offset, offset + length) of the peer's persistent send, a
 * send into that range of its persistent receive */
ssize_t exs_send_offset(int fd, const void *send_buffer, size_t send_length, int send_flags,
			off_t offset, exs_qhandle_t qhandle, exs_ahandle_t ahandle,
			exs_mhandle_t mhandle);
ssize_t exs_recv_offset(int fd, void *recv_buffer, size_t max_length, int recv_flags,
			off_t offset, exs_qhandle_t qhandle, exs_ahandle_t ahandle,
			exs_mhandle_t mhandle);

int exs_fcntl(int fd, int command, ...);

/* end a started operation of fd's with this ahandle: its event says
 * ECANCELED (exs_cancel(3)) */
int exs_cancel(int fd, exs_ahandle_t ahandle, int flags);

/* readiness of EXS sockets, as poll(2) reports it (exs_poll(3)) */
int exs_poll(struct pollfd *fds, nfds_t nfds, int timeout);

#ifdef __cplusplus
}
#endif
#endif
