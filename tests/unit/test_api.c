/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The public API's argument checks and errno values that need neither an
 * RDMA device nor exsd (EXS_SOCKET points at nothing): bad fds, wrong
 * states, NULLs, counts, flags, deleted queues, and ENETDOWN for the calls
 * that need exsd. Each test runs in its own process (Check fork mode).
 */
#include <arpa/inet.h>
#include "check_main.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exs.h>
#include "exs_int.h" /* exs_ctl_errno */

#define ck_fails(call, e)                                   \
	do {                                                \
		errno = 0;                                  \
		ck_assert_int_eq((int)(call), -1);          \
		ck_assert_int_eq(errno, (e));               \
	} while (0)

static struct sockaddr_in addr4(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(7471) };

	inet_pton(AF_INET, "198.18.0.1", &sa.sin_addr);
	return sa;
}

static void init(void)
{
	setenv("EXS_SOCKET", "/nonexistent/exsd.sock", 1);
	ck_assert_int_eq(exs_init(EXS_VERSION1), 0);
}

START_TEST(init_checks_version)
{
	ck_assert_ptr_null(exs_qcreate(1)); /* before exs_init */
	ck_assert_int_eq(errno, EINVAL);
	ck_fails(exs_socket(AF_INET, SOCK_STREAM, 0), EINVAL);
	ck_fails(exs_init(0), EINVAL);
	ck_fails(exs_init(EXS_VERSION1 + 1), EINVAL);
	init();
	ck_assert_int_eq(exs_init(EXS_VERSION1), 0); /* again: harmless */
}
END_TEST

START_TEST(socket_args)
{
	init();
	ck_fails(exs_socket(AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);
	ck_fails(exs_socket(AF_INET, SOCK_DGRAM, 0), ESOCKTNOSUPPORT);
	ck_fails(exs_socket(AF_INET, SOCK_STREAM, 99), EPROTONOSUPPORT);
	int a = exs_socket(AF_INET, SOCK_STREAM, 0);
	int b = exs_socket(AF_INET6, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(a, 0);
	ck_assert_int_ge(b, 0);
	ck_assert_int_ne(a, b);
}
END_TEST

START_TEST(bad_and_closed_fds)
{
	struct sockaddr_in sa = addr4();
	char buf[8];

	init();
	ck_fails(exs_bind(-1, (struct sockaddr *)&sa, sizeof(sa)), EBADF);
	ck_fails(exs_bind(12345, (struct sockaddr *)&sa, sizeof(sa)), EBADF);
	ck_fails(exs_listen(7, 1), EBADF);
	ck_fails(exs_write(99, buf, 1), EBADF);
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_assert_int_eq(exs_blocking_close(fd), 0);
	ck_fails(exs_blocking_close(fd), EBADF);
	ck_fails(exs_read(fd, buf, sizeof(buf)), EBADF);
}
END_TEST

START_TEST(needs_exsd_gives_enetdown)
{
	struct sockaddr_in sa = addr4();

	init();
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_fails(exs_bind(fd, (struct sockaddr *)&sa, sizeof(sa)), ENETDOWN);
	ck_fails(exs_listen(fd, 1), ENETDOWN);
	ck_fails(exs_blocking_connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ENETDOWN);
}
END_TEST

START_TEST(address_checks)
{
	struct sockaddr_in sa = addr4();
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };

	init();
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_fails(exs_bind(fd, NULL, sizeof(sa)), EINVAL);
	ck_fails(exs_bind(fd, (struct sockaddr *)&sa, 3), EINVAL);
	ck_fails(exs_bind(fd, (struct sockaddr *)&s6, sizeof(s6)), EAFNOSUPPORT);
	ck_fails(exs_blocking_connect(fd, NULL, 0), EINVAL);
}
END_TEST

START_TEST(data_before_connect)
{
	exs_qhandle_t q;
	char buf[16];

	init();
	q = exs_qcreate(2);
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_fails(exs_send(fd, buf, sizeof(buf), 0, q, NULL, EXS_MHANDLE_UNREGISTERED), ENOTCONN);
	ck_fails(exs_recv(fd, buf, sizeof(buf), 0, q, NULL, EXS_MHANDLE_UNREGISTERED), ENOTCONN);
	ck_fails(exs_send(fd, NULL, 1, 0, q, NULL, EXS_MHANDLE_UNREGISTERED), EINVAL);
	ck_fails(exs_send(fd, buf, 0, 0, q, NULL, EXS_MHANDLE_UNREGISTERED), EINVAL);
	ck_fails(exs_send(fd, buf, 1, 0x4, q, NULL, EXS_MHANDLE_UNREGISTERED), EINVAL);
	ck_fails(exs_send(fd, buf, 1, 0, NULL, NULL, EXS_MHANDLE_UNREGISTERED), EINVAL);
	ck_fails(exs_send(fd, buf, (size_t)1 << 40, 0, q, NULL, EXS_MHANDLE_UNREGISTERED), EMSGSIZE);
	ck_fails(exs_send(fd, buf, 1, 0, q, NULL, (exs_mhandle_t)buf), EINVAL);
	/* failed starts leave no operation behind on the queue */
	ck_assert_int_eq(exs_qdelete(q), 0);
}
END_TEST

/* persistent transfers and offsets (exs_send_offset(3)): the flag and
 * offset checks come before the socket's state */
START_TEST(persist_args)
{
	exs_qhandle_t q;
	char buf[16];
	struct iovec v = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
	exs_mhandle_t u = EXS_MHANDLE_UNREGISTERED;

	init();
	q = exs_qcreate(2);
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_fails(exs_send(fd, buf, 1, EXS_PERSISTENT | EXS_BLOCK, q, NULL, u), EINVAL);
	ck_fails(exs_send(fd, buf, 1, EXS_PERSISTENT | EXS_CREDIT_WAIT, q, NULL, u), EINVAL);
	ck_fails(exs_send(fd, buf, 1, EXS_PERSISTENT | EXS_UNSIGNALED, NULL, NULL, u), EINVAL);
	ck_fails(exs_send(fd, buf, 1, EXS_PERSISTENT, NULL, NULL, u), EINVAL);
	ck_fails(exs_send(fd, buf, 1, EXS_READ_NOTIFY, q, NULL, u), EINVAL);
	ck_fails(exs_recv(fd, buf, 1, EXS_PERSISTENT | EXS_READ_NOTIFY, q, NULL, u), EINVAL);
	ck_fails(exs_recv(fd, buf, 1, EXS_PERSISTENT | MSG_WAITALL, q, NULL, u), EINVAL);
	ck_fails(exs_sendmsg(fd, &m, EXS_PERSISTENT, q, NULL, NULL), EINVAL);
	ck_fails(exs_recvmsg(fd, &m, EXS_PERSISTENT, q, NULL, NULL), EINVAL);
	ck_fails(exs_send_offset(fd, buf, 1, EXS_PERSISTENT, 0, q, NULL, u), EINVAL);
	ck_fails(exs_recv_offset(fd, buf, 1, EXS_PERSISTENT, 0, q, NULL, u), EINVAL);
	ck_fails(exs_send_offset(fd, buf, 1, 0, -1, q, NULL, u), EINVAL);
	ck_fails(exs_recv_offset(fd, buf, 1, 0, -1, q, NULL, u), EINVAL);
	ck_fails(exs_recv_offset(fd, NULL, 1, 0, 0, q, NULL, u), EINVAL);
	ck_fails(exs_send_offset(fd, buf, 1, 0, 0, q, NULL, u), ENOTCONN);
	ck_fails(exs_recv_offset(fd, buf, 1, 0, 0, q, NULL, u), ENOTCONN);
	ck_fails(exs_send(fd, buf, 1, EXS_PERSISTENT, q, NULL, u), ENOTCONN);
	ck_fails(exs_recv(fd, buf, 1, EXS_PERSISTENT, q, NULL, u), ENOTCONN);
	ck_assert_int_eq(exs_qdelete(q), 0);
}
END_TEST

/* exs_sendmsg/exs_recvmsg (exs_sendmsg(3)): every msghdr check comes
 * before the socket's state, as exs_send's argument checks do */
START_TEST(msg_args)
{
	char buf[16];
	struct iovec iov[EXS_IOV_MAX + 1], empty[2] = { { buf, 0 }, { buf, 0 } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	exs_mhandle_t mh[2] = { EXS_MHANDLE_UNREGISTERED, (exs_mhandle_t)buf };
	exs_qhandle_t q;
	int fd, i;

	init();
	q = exs_qcreate(2);
	fd = exs_socket(AF_INET, SOCK_STREAM, 0);
	for (i = 0; i <= EXS_IOV_MAX; i++)
		iov[i] = (struct iovec){ buf + i % 16, 1 };
	ck_fails(exs_sendmsg(fd, NULL, 0, q, NULL, NULL), EINVAL);
	ck_fails(exs_recvmsg(fd, NULL, 0, q, NULL, NULL), EINVAL);
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), ENOTCONN);
	ck_fails(exs_recvmsg(fd, &m, 0, q, NULL, NULL), ENOTCONN);
	ck_fails(exs_sendmsg(fd + 100, &m, 0, q, NULL, NULL), EBADF);
	m.msg_iovlen = 0;
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EMSGSIZE);
	m.msg_iovlen = EXS_IOV_MAX + 1;
	ck_fails(exs_recvmsg(fd, &m, 0, q, NULL, NULL), EMSGSIZE);
	m.msg_iovlen = EXS_IOV_MAX;
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), ENOTCONN);
	m.msg_iov = NULL;
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EINVAL);
	m = (struct msghdr){ .msg_iov = empty, .msg_iovlen = 2 };
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EINVAL); /* 0 bytes */
	m.msg_iov = iov;
	m.msg_control = buf;
	ck_fails(exs_recvmsg(fd, &m, 0, q, NULL, NULL), EINVAL);
	m.msg_control = NULL;
	m.msg_controllen = 1;
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EINVAL);
	m.msg_controllen = 0;
	m.msg_name = buf;
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EISCONN);
	m.msg_namelen = 4; /* a receive reports no address: namelen 0 */
	ck_fails(exs_recvmsg(fd, &m, 0, q, NULL, NULL), ENOTCONN);
	ck_assert_int_eq((int)m.msg_namelen, 0);
	m.msg_name = NULL;
	iov[1].iov_base = NULL;
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EINVAL);
	iov[1] = (struct iovec){ buf, EXS_MAX_XFER };
	ck_fails(exs_sendmsg(fd, &m, 0, q, NULL, NULL), EMSGSIZE);
	iov[1] = (struct iovec){ buf, 1 };
	ck_fails(exs_sendmsg(fd, &m, 0x4, q, NULL, NULL), EINVAL);
	ck_fails(exs_sendmsg(fd, &m, MSG_WAITALL, q, NULL, NULL), EINVAL);
	ck_fails(exs_sendmsg(fd, &m, 0, NULL, NULL, NULL), EINVAL);
	ck_fails(exs_recvmsg(fd, &m, 0, q, NULL, mh), EINVAL); /* mh[1] names nothing */
	ck_assert_int_eq(exs_fcntl(fd, EXS_F_GETSGEMAX), -1);
	ck_assert_int_eq(errno, ENOTCONN);
	ck_assert_int_eq(exs_qdelete(q), 0);
}
END_TEST

/* exs_sendfile (exs_sendfile(3)): the vector's checks, then the socket's;
 * a refused call leaves no descriptor of its own open */
START_TEST(sendfile_args)
{
	struct exs_sendfilevec v[2] = {
		{ .exs_sfv_type = EXS_SFV_PATH, .exs_sfv_u.exs_pathv = "/dev/null", .exs_sfv_len = 1 },
		{ .exs_sfv_type = EXS_SFV_IOV, .exs_sfv_u.exs_iov = { "abc", EXS_MHANDLE_UNREGISTERED },
		  .exs_sfv_len = 3 },
	};
	exs_qhandle_t q;
	int fd, probe;

	ck_fails(exs_sendfile(0, v, 1, 0, NULL, NULL), EINVAL); /* before exs_init */
	init();
	q = exs_qcreate(2);
	fd = exs_socket(AF_INET, SOCK_STREAM, 0);
	probe = dup(0);
	close(probe);
	ck_fails(exs_sendfile(fd, v, 2, 0, q, NULL), ENOTCONN);
	ck_fails(exs_sendfile(fd, v, 0, 0, q, NULL), EINVAL);
	ck_fails(exs_sendfile(fd, v, EXS_SENDVEC_MAX + 1, 0, q, NULL), EINVAL);
	ck_fails(exs_sendfile(fd, NULL, 1, 0, q, NULL), EINVAL);
	ck_fails(exs_sendfile(fd, v, 2, 0x4, q, NULL), EINVAL);
	ck_fails(exs_sendfile(fd, v, 2, 0, NULL, NULL), EINVAL);
	ck_fails(exs_sendfile(fd + 100, v, 2, 0, q, NULL), EBADF);
	v[1].exs_sfv_off = -1;
	ck_fails(exs_sendfile(fd, v, 2, 0, q, NULL), EINVAL);
	v[1].exs_sfv_off = 0;
	v[1].exs_sfv_u.exs_iov.exs_mhandle = (exs_mhandle_t)v;
	ck_fails(exs_sendfile(fd, v, 2, 0, q, NULL), EINVAL);
	v[0].exs_sfv_u.exs_pathv = "/nonexistent/file";
	ck_fails(exs_sendfile(fd, v, 1, 0, q, NULL), ENOENT);
	v[0].exs_sfv_type = EXS_SFV_FD;
	v[0].exs_sfv_u.exs_fd = probe; /* closed */
	ck_fails(exs_sendfile(fd, v, 1, 0, q, NULL), EBADF);
	v[0].exs_sfv_type = 0;
	ck_fails(exs_sendfile(fd, v, 1, 0, q, NULL), EINVAL);
	fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	v[0] = (struct exs_sendfilevec){ .exs_sfv_type = EXS_SFV_PATH,
					 .exs_sfv_u.exs_pathv = "/dev/zero", .exs_sfv_len = 1 };
	ck_fails(exs_sendfile(fd, v, 1, 0, q, NULL), ENOTCONN);
	/* the files opened for the refused calls are closed again: the
	 * lowest free descriptor is the same as before them */
	ck_assert_int_eq(dup(0), probe);
	ck_assert_int_eq(exs_qdelete(q), 0);
}
END_TEST

START_TEST(queue_args)
{
	exs_event_t ev;
	struct timeval bad = { 0, 2000000 };

	init();
	ck_assert_ptr_null(exs_qcreate(0));
	ck_assert_int_eq(errno, EINVAL);
	exs_qhandle_t q = exs_qcreate(1);
	ck_assert_ptr_nonnull(q);
	ck_fails(exs_qdequeue(q, &ev, 0, NULL), EINVAL);
	ck_fails(exs_qdequeue(q, NULL, 1, NULL), EINVAL);
	ck_fails(exs_qdequeue(q, &ev, 1, &bad), EINVAL);
	ck_fails(exs_qdequeue(NULL, &ev, 1, NULL), EINVAL);
	ck_assert_int_eq(exs_qdelete(q), 0);
	ck_fails(exs_qdelete(q), EINVAL);
	ck_fails(exs_qdequeue(q, &ev, 1, NULL), EINVAL);
	ck_fails(exs_qdelete(NULL), EINVAL);
}
END_TEST

/* guide §11.2.7-11.2.8: attributes are ints; the wait type is fixed at first use */
START_TEST(queue_attributes)
{
	struct timeval zero = { 0, 0 };
	exs_event_t ev;
	int v = -1;

	init();
	exs_qhandle_t q = exs_qcreate(2);
	ck_fails(exs_qmodify(q, EXS_QATTR_WAIT, NULL), EINVAL);
	ck_fails(exs_qstatus(q, EXS_QATTR_WAIT, NULL), EINVAL);
	ck_fails(exs_qmodify(NULL, EXS_QATTR_WAIT, &v), EINVAL);
	ck_fails(exs_qstatus(q, 42, &v), EINVAL);
	ck_fails(exs_qmodify(q, EXS_QATTR_WAIT, &(int){ 3 }), EINVAL);
	ck_assert_int_eq(exs_qmodify(q, EXS_QATTR_WAIT, &(int){ EXS_WAIT_NOTIFY }), 0);
	ck_assert_int_eq(exs_qstatus(q, EXS_QATTR_WAIT, &v), 0);
	ck_assert_int_eq(v, EXS_WAIT_NOTIFY);
	ck_assert_int_eq(exs_qdequeue(q, &ev, 1, &zero), 0);
	ck_fails(exs_qmodify(q, EXS_QATTR_WAIT, &(int){ EXS_WAIT_ADAPTIVE }), EBUSY);
	ck_fails(exs_qmodify(q, EXS_QATTR_EVENTS, &(int){ 0 }), EINVAL);
	ck_assert_int_eq(exs_qmodify(q, EXS_QATTR_EVENTS, &(int){ 64 }), 0);
	ck_assert_int_eq(exs_qstatus(q, EXS_QATTR_EVENTS, &v), 0);
	ck_assert_int_eq(v, 0);
	ck_fails(exs_qmodify(q, EXS_QATTR_SIGNAL, &(int){ SIGSTOP }), EINVAL);
	ck_fails(exs_qmodify(q, EXS_QATTR_SIGNAL, &(int){ -1 }), EINVAL);
	ck_assert_int_eq(exs_qmodify(q, EXS_QATTR_SIGNAL, &(int){ SIGUSR2 }), 0);
	ck_assert_int_eq(exs_qstatus(q, EXS_QATTR_SIGNAL, &v), 0);
	ck_assert_int_eq(v, SIGUSR2);
	ck_assert_int_eq(exs_qdelete(q), 0);
	ck_fails(exs_qstatus(q, EXS_QATTR_WAIT, &v), EINVAL);
}
END_TEST

/* guide §4.5: argument checks come before the socket's state */
START_TEST(shutdown_args)
{
	init();
	exs_qhandle_t q = exs_qcreate(1);
	int fd = exs_socket(AF_INET, SOCK_STREAM, 0);

	ck_fails(exs_shutdown(fd, 3, 0, q, NULL), EINVAL);
	ck_fails(exs_shutdown(fd, -1, 0, q, NULL), EINVAL);
	ck_fails(exs_shutdown(fd, SHUT_RD, EXS_DONTLINGER, q, NULL), EINVAL);
	ck_fails(exs_shutdown(fd, SHUT_RD, 0, NULL, NULL), EINVAL);
	ck_fails(exs_shutdown(fd, SHUT_RDWR, 0, q, NULL), ENOTCONN);
	ck_fails(exs_shutdown(fd, SHUT_WR, EXS_BLOCK, NULL, NULL), ENOTCONN);
	ck_fails(exs_shutdown(-1, SHUT_WR, 0, q, NULL), EBADF);
	ck_assert_int_eq(exs_blocking_close(fd), 0);
	ck_fails(exs_shutdown(fd, SHUT_WR, 0, q, NULL), EBADF);
	ck_assert_int_eq(exs_qdelete(q), 0);
}
END_TEST

START_TEST(cancel_args)
{
	ck_fails(exs_cancel(0, NULL, 0), EINVAL); /* before exs_init */
	init();
	int fd = exs_socket(AF_INET, SOCK_STREAM, 0);

	ck_fails(exs_cancel(fd, NULL, 0x100), EINVAL);
	ck_fails(exs_cancel(fd, NULL, -1), EINVAL);
	ck_fails(exs_cancel(fd, NULL, 0), ENOENT); /* nothing started */
	ck_fails(exs_cancel(fd, (void *)1, EXS_CANCEL_ANY), ENOENT);
	ck_fails(exs_cancel(-1, NULL, 0), EBADF);
	ck_fails(exs_cancel(54321, NULL, 0), EBADF);
	ck_assert_int_eq(exs_blocking_close(fd), 0);
	ck_fails(exs_cancel(fd, NULL, 0), EBADF);
}
END_TEST

START_TEST(call_flags_and_states)
{
	struct exs_acceptaddr aa = { 0 };
	exs_qhandle_t q;

	init();
	q = exs_qcreate(1);
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_fails(exs_close(fd, 0x1, q, NULL), EINVAL);
	ck_fails(exs_close(fd, 0, NULL, NULL), EINVAL);
	ck_fails(exs_accept(fd, &aa, 1, 0, q), EINVAL); /* not listening */
	ck_fails(exs_accept(fd, &aa, 2, EXS_BLOCK, NULL), EINVAL);
	ck_fails(exs_accept(fd, NULL, 1, 0, q), EINVAL);
	ck_fails(exs_accept(fd, &aa, 0, 0, q), EINVAL);
	ck_fails(exs_connect(fd, NULL, 0, 0x2, NULL, q, NULL), EINVAL);
	ck_assert_int_eq(exs_qdelete(q), 0);
}
END_TEST

START_TEST(fcntl_credits)
{
	init();
	int fd = exs_socket(AF_INET, SOCK_SEQPACKET, 0);
	ck_assert_int_eq(exs_fcntl(fd, EXS_F_GETFLOWCONTROLCREDITS), 32);
	ck_assert_int_eq(exs_fcntl(fd, EXS_F_SETFLOWCONTROLCREDITS, 8), 32);
	ck_assert_int_eq(exs_fcntl(fd, EXS_F_GETFLOWCONTROLCREDITS), 8);
	ck_fails(exs_fcntl(fd, EXS_F_SETFLOWCONTROLCREDITS, 0), EINVAL);
	ck_fails(exs_fcntl(fd, EXS_F_SETFLOWCONTROLCREDITS, 100000), EINVAL);
	ck_fails(exs_fcntl(fd, 4242, 1), EINVAL);
	ck_fails(exs_fcntl(fd + 100, EXS_F_GETFLOWCONTROLCREDITS), EBADF);
}
END_TEST

START_TEST(registration_args)
{
	static char buf[4096];

	init();
	ck_assert_ptr_eq(exs_mregister(NULL, 10, 0), EXS_MHANDLE_INVALID);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(exs_mregister(buf, 0, 0), EXS_MHANDLE_INVALID);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(exs_mregister(buf, sizeof(buf), 0x100000), EXS_MHANDLE_INVALID);
	ck_assert_int_eq(errno, EINVAL);
	ck_fails(exs_mderegister(EXS_MHANDLE_INVALID, 0), EINVAL);
	ck_fails(exs_mderegister(EXS_MHANDLE_UNREGISTERED, 0), EINVAL);
}
END_TEST

/*
 * A deleted queue's handle stays invalid for ever, also once the library
 * serves the next exs_qcreate from the same memory (it used to return the
 * same handle, and the stale one then worked on the new queue).
 */
START_TEST(stale_queue_handle)
{
	struct timeval zero = { 0, 0 };
	char buf[8];
	exs_event_t ev;
	int fd, v = 8;

	init();
	fd = exs_socket(PF_INET, SOCK_STREAM, 0);
	exs_qhandle_t a = exs_qcreate(4), b;
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(exs_qdelete(a), 0);
	for (int i = 0; i < 1000; i++) {
		b = exs_qcreate(4);
		ck_assert_ptr_nonnull(b);
		ck_fails(exs_qdequeue(a, &ev, 1, &zero), EINVAL);
		ck_fails(exs_qstatus(a, EXS_QATTR_EVENTS, &v), EINVAL);
		ck_fails(exs_qmodify(a, EXS_QATTR_EVENTS, &v), EINVAL);
		ck_fails(exs_send(fd, buf, 1, 0, a, NULL, EXS_MHANDLE_UNREGISTERED), EINVAL);
		ck_fails(exs_close(fd, 0, a, NULL), EINVAL);
		ck_fails(exs_qdelete(a), EINVAL);
		ck_assert_ptr_ne(a, b);
		/* the new queue is untouched and works */
		ck_assert_int_eq(exs_qdequeue(b, &ev, 1, &zero), 0);
		ck_assert_int_eq(exs_qstatus(b, EXS_QATTR_EVENTS, &v), 0);
		ck_assert_int_eq(v, 0);
		ck_fails(exs_send(fd, buf, 1, 0, b, NULL, EXS_MHANDLE_UNREGISTERED), ENOTCONN);
		ck_assert_int_eq(exs_qdelete(b), 0);
		ck_fails(exs_qdelete(b), EINVAL);
	}
	ck_fails(exs_qdequeue((exs_qhandle_t)buf, &ev, 1, &zero), EINVAL); /* never a handle */
	ck_fails(exs_qdelete((exs_qhandle_t)~(unsigned long)0), EINVAL);
}
END_TEST

/* A second exs_mderegister of the same handle must not remove the region
 * registered after the first (it used to). */
START_TEST(stale_registration)
{
	static char buf1[4096], buf2[4096];
	exs_mhandle_t m1, m2;
	int fd;

	init();
	fd = exs_socket(PF_INET, SOCK_STREAM, 0);
	exs_qhandle_t q = exs_qcreate(4);
	m1 = exs_mregister(buf1, sizeof(buf1), 0);
	ck_assert_ptr_ne(m1, EXS_MHANDLE_INVALID);
	ck_assert_int_eq(exs_mderegister(m1, 0), 0);
	m2 = exs_mregister(buf2, sizeof(buf2), 0);
	ck_assert_ptr_ne(m2, EXS_MHANDLE_INVALID);
	ck_fails(exs_mderegister(m1, 0), EINVAL);
	ck_assert_ptr_ne(m1, m2);
	/* m2 survived: a transfer with it passes the handle check */
	ck_fails(exs_send(fd, buf2, 16, 0, q, NULL, m2), ENOTCONN);
	ck_fails(exs_send(fd, buf1, 16, 0, q, NULL, m1), EINVAL);
	ck_fails(exs_recv(fd, buf2, 16, 0, q, NULL, m1), EINVAL);
	ck_assert_int_eq(exs_mderegister(m2, 0), 0);
	ck_fails(exs_mderegister(m2, 0), EINVAL);
	ck_fails(exs_send(fd, buf2, 16, 0, q, NULL, m2), EINVAL);
}
END_TEST

/* An errno from exsd's channel (a peer's reject passes through it) reaches
 * the application only if a set-up or request can really fail with it. */
START_TEST(reject_errnos_bounded)
{
	static const int refused[] = { 0, -1, -ECONNREFUSED, ENOEXEC, EINTR, ECHILD, EBADF,
				       EFAULT, E2BIG, 4095, 4096, 100000, -4096 };
	static const int passed[] = { ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH,
				      ENODEV, EADDRNOTAVAIL, EACCES, ENOBUFS, EPERM,
				      ECONNRESET, ECONNABORTED, ENETDOWN, EPROTO, ENOMEM };
	size_t i;

	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		ck_assert_int_eq(exs_ctl_errno(refused[i], ECONNREFUSED), ECONNREFUSED);
		ck_assert_int_eq(exs_ctl_errno(refused[i], EIO), EIO);
	}
	for (i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
		ck_assert_int_eq(exs_ctl_errno(passed[i], EIO), passed[i]);
}
END_TEST

/* A message from exsd with another protocol version drops the channel,
 * and the message it unpacked is freed (LeakSanitizer, in the ASan run). */
START_TEST(ctl_bad_version_dropped)
{
	ExsCtl__Msg m = EXS_CTL__MSG__INIT, *out = NULL;
	uint8_t buf[64];
	size_t n;
	int sv[2];

	init();
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	m.version = EXS_CTL_VERSION + 1;
	m.seq = 7;
	n = exs_ctl__msg__pack(&m, buf);
	exs_g.ctl_fd = sv[0];
	ck_assert_int_eq(exs_ctl_take(sv[0], buf, (ssize_t)n, &out), -ENETDOWN);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(exs_g.ctl_fd, -1);
	close(sv[1]);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { init_checks_version, socket_args, bad_and_closed_fds, needs_exsd_gives_enetdown, address_checks, data_before_connect, persist_args, msg_args, sendfile_args, queue_args, queue_attributes, shutdown_args, cancel_args, call_flags_and_states, fcntl_credits, registration_args, stale_queue_handle, stale_registration, reject_errnos_bounded, ctl_bad_version_dropped, NULL };

	return run_tests("api", 20, tests);
}
