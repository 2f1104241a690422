/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Who owns a QP. exsd puts a client's QP number into the CM exchange, so it
 * must know that the client owns that QP: otherwise a client could splice
 * another process's QP into a connection of its own choosing. The kernel's
 * RDMA resource tracker records, for every user QP, the task that created
 * it; RDMA netlink (nldev, RES_QP_GET) reports its pid.
 *
 * What the kernel reports is the pid of the creating *thread*, as seen from
 * exsd's pid namespace (libexs creates its QPs in its progress thread and
 * its exs-spare thread), so it passes when it is the client's SO_PEERCRED
 * pid (a tgid) or one of that process's threads (/proc/PID/task/TID). exsd's /proc must
 * belong to exsd's pid namespace, as it does in a normal system or service.
 *
 * One QP is first asked for alone (a doit request: device, port, QP
 * number); a kernel that refuses that form is asked for a dump of the
 * device's QPs, filtered here. Fail closed: when the tracker cannot be
 * asked (no RDMA netlink, no resource tracking), or does not know the QP,
 * or knows no pid for it (a kernel QP), the QP is refused.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include "exsd.h"

#define QPOWN_BUF 65536		/* the largest netlink datagram read */
#define QPOWN_TIMEOUT_MS 1000	/* the kernel answers at once; never hang on it */

struct qp_query {
	uint32_t qpn;
	bool found;
	pid_t pid;		/* 0: the tracker knows no task */
};

struct nl_req {
	struct nlmsghdr h;
	uint8_t attrs[3 * NLA_ALIGN(NLA_HDRLEN + sizeof(uint32_t))];
};

static void put_u32(struct nl_req *r, uint16_t type, uint32_t v)
{
	struct nlattr *a = (struct nlattr *)((uint8_t *)r + r->h.nlmsg_len);

	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + sizeof(v);
	memcpy((uint8_t *)a + NLA_HDRLEN, &v, sizeof(v));
	r->h.nlmsg_len += NLA_ALIGN(a->nla_len);
}

/*
 * Calls fn for every attribute in [p, p + len) that fits there whole;
 * stops at the first that does not.
 */
static void for_each_attr(const uint8_t *p, size_t len,
			  void (*fn)(uint16_t type, const uint8_t *data, size_t n, void *arg), void *arg)
{
	while (len >= NLA_HDRLEN) {
		const struct nlattr *a = (const struct nlattr *)p;
		size_t step;

		if (a->nla_len < NLA_HDRLEN || a->nla_len > len)
			return;
		fn(a->nla_type & NLA_TYPE_MASK, p + NLA_HDRLEN, a->nla_len - NLA_HDRLEN, arg);
		step = NLA_ALIGN(a->nla_len);
		if (step >= len)
			return;
		p += step;
		len -= step;
	}
}

static bool get_u32(const uint8_t *data, size_t n, uint32_t *v)
{
	if (n < sizeof(*v))
		return false;
	memcpy(v, data, sizeof(*v));
	return true;
}

/* The attributes of one QP: a dump's table entry or a doit reply's body. */
struct qp_entry {
	bool has_qpn;
	uint32_t qpn, pid;
};

static void entry_attr(uint16_t type, const uint8_t *data, size_t n, void *arg)
{
	struct qp_entry *en = arg;

	if (type == RDMA_NLDEV_ATTR_RES_LQPN)
		en->has_qpn = get_u32(data, n, &en->qpn);
	else if (type == RDMA_NLDEV_ATTR_RES_PID)
		get_u32(data, n, &en->pid);
}

static void match_entry(struct qp_query *q, const uint8_t *data, size_t n)
{
	struct qp_entry en = { 0 };

	for_each_attr(data, n, entry_attr, &en);
	if (en.has_qpn && en.qpn == q->qpn) {
		q->found = true;
		q->pid = (pid_t)en.pid;
	}
}

static void table_attr(uint16_t type, const uint8_t *data, size_t n, void *arg)
{
	if (type == RDMA_NLDEV_ATTR_RES_QP_ENTRY)
		match_entry(arg, data, n);
}

static void top_attr(uint16_t type, const uint8_t *data, size_t n, void *arg)
{
	if (type == RDMA_NLDEV_ATTR_RES_QP)
		for_each_attr(data, n, table_attr, arg);
}

/* One reply datagram; returns 1 when the answer is complete, 0 for more, -errno. */
static int parse_reply(struct qp_query *q, const uint8_t *buf, size_t len, uint32_t seq)
{
	const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
	size_t left = len;

	for (; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
		const uint8_t *body = NLMSG_DATA(h);
		size_t n = h->nlmsg_len - NLMSG_HDRLEN;

		if (h->nlmsg_seq != seq)
			continue; /* an answer to an earlier request */
		if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
			int err = 0;

			/* an error's and a dump's end carry the errno first */
			if (n >= sizeof(err))
				memcpy(&err, body, sizeof(err));
			else if (h->nlmsg_type == NLMSG_ERROR)
				return -EBADMSG;
			return !err ? 1 : exs_is_errno(-(long)err) ? err : -EIO;
		}
		/* a doit reply holds the QP's attributes at its top level */
		match_entry(q, body, n);
		for_each_attr(body, n, top_attr, q);
		/* and is the whole answer: only a dump's parts are multi */
		if (!(h->nlmsg_flags & NLM_F_MULTI))
			return 1;
	}
	return 0;
}

static int ask(int fd, struct qp_query *q, struct nl_req *r)
{
	static uint8_t buf[QPOWN_BUF];
	static uint32_t seq;
	struct sockaddr_nl from;
	socklen_t flen;
	ssize_t n;
	int ret = 0;

	r->h.nlmsg_seq = ++seq;
	if (send(fd, r, r->h.nlmsg_len, 0) != (ssize_t)r->h.nlmsg_len)
		return -errno;
	do {
		flen = sizeof(from);
		n = recvfrom(fd, buf, sizeof(buf), MSG_TRUNC, (struct sockaddr *)&from, &flen);
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (n > (ssize_t)sizeof(buf))
			return -EMSGSIZE;
		if (flen == sizeof(from) && from.nl_family == AF_NETLINK && from.nl_pid == 0)
			ret = parse_reply(q, buf, (size_t)n, r->h.nlmsg_seq);
		/* else not from the kernel: ignored */
	} while (!ret);
	return ret < 0 ? ret : 0;
}

static void request(struct nl_req *r, uint16_t flags, uint32_t dev_index)
{
	memset(r, 0, sizeof(*r));
	r->h.nlmsg_len = NLMSG_HDRLEN;
	r->h.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET);
	r->h.nlmsg_flags = NLM_F_REQUEST | flags;
	put_u32(r, RDMA_NLDEV_ATTR_DEV_INDEX, dev_index);
}

/*
 * The pid of the task that created QP `qpn` on device `dev_index` (port
 * `port`, 0 if not known), as exsd's pid namespace sees it: 0 when the
 * tracker knows no task for it. -ENOENT: no such QP; other -errno: the
 * tracker could not be asked.
 */
int qp_owner(uint32_t dev_index, uint32_t port, uint32_t qpn, pid_t *pid)
{
	struct timeval tv = { .tv_sec = QPOWN_TIMEOUT_MS / 1000,
			      .tv_usec = (QPOWN_TIMEOUT_MS % 1000) * 1000 };
	static int fd = -1; /* kept: three system calls less per question */
	struct qp_query q = { .qpn = qpn };
	struct nl_req r;
	int ret = 0;

	if (fd < 0) {
		fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
		if (fd < 0)
			return -errno;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	if (port) {
		request(&r, 0, dev_index); /* no NLM_F_ACK: the reply says enough */
		put_u32(&r, RDMA_NLDEV_ATTR_PORT_INDEX, port);
		put_u32(&r, RDMA_NLDEV_ATTR_RES_LQPN, qpn);
		ret = ask(fd, &q, &r);
		if (!ret && !q.found)
			ret = -EBADMSG; /* an answer of a shape not known here */
		if (ret && ret != -ENOENT)
			exsd_log(LOG_DEBUG, "qp %u: single query failed (%s), dumping", qpn, strerror(-ret));
	}
	if (!port || (ret && ret != -ENOENT)) {
		request(&r, NLM_F_DUMP, dev_index);
		q.found = false;
		ret = ask(fd, &q, &r);
	}
	if (ret && ret != -ENOENT) { /* a late answer must not meet the next question */
		close(fd);
		fd = -1;
	}
	if (ret)
		return ret;
	if (!q.found)
		return -ENOENT;
	*pid = q.pid;
	return 0;
}

/* The thread group of task `pid` (a thread's pid gives its process). */
static pid_t tgid_of(pid_t pid)
{
	uint64_t tgid = 0;

	return proc_status_field(pid, "Tgid", 10, &tgid) ? 0 : (pid_t)tgid;
}

/*
 * Whether client c may have QP `qpn` of `id`'s device brokered: 0; -EPERM
 * when the tracker does not know the QP or names another owner or none
 * (Linux 6.1's QP-number race can do either to an honest client: see
 * Rebuild in exs_control.proto); -EIO when the tracker cannot be asked.
 * A refusal is logged as a warning that names the client, the QP and its
 * owner, or, when `retry` (the client is asked for another QP), as a notice.
 */
int qp_check_owner(struct client *c, uint32_t sock, struct rdma_cm_id *id, uint32_t qpn, bool retry)
{
	return qp_check_owner_on(c, sock, ibv_get_device_name(id->verbs->device),
				 ibv_get_device_index(id->verbs->device), id->port_num, qpn, retry);
}

/* The same for QP `qpn` of device `dev` (kernel index `index`, port `port`
 * or 0 when not known). */
int qp_check_owner_on(struct client *c, uint32_t sock, const char *dev, int index, uint32_t port,
		      uint32_t qpn, bool retry)
{
	const char *then = retry ? "asking for another" : "refused";
	int level = retry ? LOG_NOTICE : LOG_WARNING;
	pid_t owner = 0, tgid = 0;
	int ret;

	if (index < 0) {
		ret = -ENODEV;
	} else {
		ret = qp_owner((uint32_t)index, port, qpn, &owner);
		if (!ret && owner > 0 && (owner == c->pid || proc_is_thread_of(c->pid, owner)))
			return 0;
		if (!ret && owner > 0)
			tgid = tgid_of(owner); /* for the warning */
	}
	if (ret && ret != -ENOENT) {
		exsd_log(LOG_ERR, "client %u (%s, pid %d) sock %u: cannot ask the kernel who owns QP %u on %s (%s): refused",
			 c->id, c->comm, (int)c->pid, sock, qpn, dev, strerror(-ret));
		return -EIO;
	}
	if (ret)
		exsd_log(level, "client %u (%s, pid %d) sock %u: QP %u on %s does not exist: %s",
			 c->id, c->comm, (int)c->pid, sock, qpn, dev, then);
	else if (owner <= 0)
		exsd_log(level, "client %u (%s, pid %d) sock %u: QP %u on %s belongs to no live process: %s",
			 c->id, c->comm, (int)c->pid, sock, qpn, dev, then);
	else
		exsd_log(level, "client %u (%s, pid %d) sock %u: QP %u on %s belongs to pid %d (process %d), not to the client: %s",
			 c->id, c->comm, (int)c->pid, sock, qpn, dev, (int)owner, (int)tgid, then);
	return -EPERM;
}
