/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A fake rdmacm (and the few verbs calls exsd makes) for fuzzing exsd's
 * control protocol: link-time definitions of the rdma_* functions exsd
 * uses, so exsd's real cm.c runs against them. Each id follows the state
 * machine of a real rdmacm id, and the harness may only deliver an event
 * that a kernel could deliver in that id's state (fake_cm_deliver()).
 * It also checks what real librdmacm would punish: destroying an id whose
 * event is not acknowledged (a deadlock there), acking twice, calls on a
 * destroyed id. This is a fuzzing tool, never evidence that a feature works.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "fake_rdmacm.h"

struct fake_id {
	struct rdma_cm_id id; /* first: exsd sees this */
	enum fake_state state;
	bool destroyed;
	unsigned unacked;  /* events handed out and not yet acked */
	uint16_t port;     /* bound port, host order; 0: none */
	struct fake_id *next;
};

struct fake_event {
	struct rdma_cm_event ev;
	struct fake_id *fid;
	uint8_t pd[256];
	bool out;  /* handed to exsd */
	struct fake_event *next;
};

static struct rdma_event_channel chan = { .fd = -1 };
static struct fake_id *ids;
static struct fake_event *queue;
static struct ibv_device devs[2];
static struct ibv_context ctxs[2];
static unsigned fail_mask;
static int fail_errno = EIO;
unsigned fake_live_ids;

static void fatal(const char *what)
{
	fprintf(stderr, "fake rdmacm: %s\n", what);
	abort();
}

static struct fake_id *fid_of(struct rdma_cm_id *id)
{
	struct fake_id *f = (struct fake_id *)id;

	if (!id)
		fatal("NULL id");
	if (f->destroyed)
		fatal("call on a destroyed id");
	return f;
}

/* A call the harness made fail: -1 and errno, like librdmacm. */
static bool failing(unsigned call)
{
	if (!(fail_mask & call))
		return false;
	fail_mask &= ~call;
	errno = fail_errno;
	return true;
}

void fake_cm_fail_next(unsigned calls, int err)
{
	fail_mask = calls;
	fail_errno = err > 0 ? err : EIO;
}

static void devices_init(void)
{
	if (ctxs[0].device)
		return;
	for (int i = 0; i < 2; i++) {
		snprintf(devs[i].name, sizeof(devs[i].name), i ? "siw0" : "rxe0");
		snprintf(devs[i].dev_name, sizeof(devs[i].dev_name), "uverbs%d", i);
		devs[i].transport_type = i ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
		devs[i].node_type = i ? IBV_NODE_RNIC : IBV_NODE_CA;
		ctxs[i].device = &devs[i];
	}
}

static struct fake_id *new_id(void *context)
{
	struct fake_id *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->id.channel = &chan;
	f->id.context = context;
	f->id.ps = RDMA_PS_TCP;
	f->next = ids;
	ids = f;
	fake_live_ids++;
	return f;
}

/* ---- the channel */

struct rdma_event_channel *rdma_create_event_channel(void)
{
	devices_init();
	if (chan.fd < 0)
		chan.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return chan.fd < 0 ? NULL : &chan;
}

void rdma_destroy_event_channel(struct rdma_event_channel *c)
{
	(void)c;
}

int rdma_get_cm_event(struct rdma_event_channel *c, struct rdma_cm_event **event)
{
	uint64_t v;

	(void)c;
	for (struct fake_event *e = queue; e; e = e->next)
		if (!e->out) {
			e->out = true;
			e->fid->unacked++;
			*event = &e->ev;
			return 0;
		}
	if (read(chan.fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		fatal("eventfd read");
	errno = EAGAIN;
	return -1;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct fake_event **p, *e;

	for (p = &queue; *p && &(*p)->ev != event; p = &(*p)->next)
		;
	e = *p;
	if (!e || !e->out)
		fatal("ack of an event never handed out, or acked twice");
	*p = e->next;
	e->fid->unacked--;
	free(e);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static char s[16];

	snprintf(s, sizeof(s), "EV%d", (int)event);
	return s;
}

/* ---- ids */

int rdma_create_id(struct rdma_event_channel *c, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	struct fake_id *f;

	(void)c;
	(void)ps;
	if (failing(FAKE_CREATE_ID))
		return -1;
	f = new_id(context);
	if (!f) {
		errno = ENOMEM;
		return -1;
	}
	*id = &f->id;
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct fake_id *f = fid_of(id);
	struct fake_event **p = &queue;

	if (f->unacked)
		fatal("rdma_destroy_id with an unacknowledged event: librdmacm would wait for ever");
	/* events not yet read die with the id, as in the kernel */
	while (*p) {
		if ((*p)->fid == f) {
			struct fake_event *e = *p;

			*p = e->next;
			free(e);
		} else {
			p = &(*p)->next;
		}
	}
	f->destroyed = true;
	f->state = FS_DESTROYED;
	fake_live_ids--;
	return 0;
}

static bool port_used(uint16_t port)
{
	for (struct fake_id *f = ids; f; f = f->next)
		if (!f->destroyed && f->port == port)
			return true;
	return false;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct fake_id *f = fid_of(id);
	uint16_t port = ntohs(((struct sockaddr_in *)addr)->sin_port);

	if (f->state != FS_IDLE)
		fatal("bind of an id that is not idle");
	if (failing(FAKE_BIND))
		return -1;
	if (!port) {
		errno = EINVAL; /* exsd always names its port */
		return -1;
	}
	if (port_used(port)) {
		errno = EADDRINUSE;
		return -1;
	}
	f->port = port;
	memcpy(&f->id.route.addr.src_addr, addr,
	       addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	f->state = FS_BOUND;
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return htons(fid_of(id)->port);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct fake_id *f = fid_of(id);

	(void)backlog;
	if (f->state != FS_BOUND)
		fatal("listen on an unbound id");
	if (failing(FAKE_LISTEN))
		return -1;
	f->state = FS_LISTEN;
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int ms)
{
	struct fake_id *f = fid_of(id);

	(void)src;
	(void)ms;
	if (f->state != FS_BOUND && f->state != FS_IDLE)
		fatal("resolve_addr in a wrong state");
	if (failing(FAKE_RESOLVE))
		return -1;
	memcpy(&f->id.route.addr.dst_addr, dst,
	       dst->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	f->state = FS_ADDR_QUERY;
	return 0;
}

int rdma_resolve_route(struct rdma_cm_id *id, int ms)
{
	struct fake_id *f = fid_of(id);

	(void)ms;
	if (f->state != FS_ADDR_RESOLVED)
		fatal("resolve_route before the address is resolved");
	if (failing(FAKE_RESOLVE))
		return -1;
	f->state = FS_ROUTE_QUERY;
	return 0;
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	struct fake_id *f = fid_of(id);

	if (!f->id.verbs)
		fatal("init_qp_attr without a device");
	if (failing(FAKE_INIT_QP_ATTR))
		return -1;
	if (f->id.verbs->device->transport_type == IBV_TRANSPORT_IWARP &&
	    qp_attr->qp_state != IBV_QPS_INIT) {
		errno = EINVAL; /* iw_cm moves the QP itself */
		return -1;
	}
	switch (qp_attr->qp_state) {
	case IBV_QPS_INIT:
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		qp_attr->port_num = 1;
		qp_attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		return 0;
	case IBV_QPS_RTR:
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		qp_attr->path_mtu = IBV_MTU_1024;
		qp_attr->dest_qp_num = 17;
		qp_attr->ah_attr.is_global = 1;
		qp_attr->ah_attr.port_num = 1;
		return 0;
	case IBV_QPS_RTS:
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
		qp_attr->timeout = 14;
		qp_attr->retry_cnt = 7;
		return 0;
	default:
		errno = EINVAL;
		return -1;
	}
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct fake_id *f = fid_of(id);

	if (f->state != FS_ROUTE_RESOLVED)
		fatal("connect before the route is resolved");
	if (!p || p->private_data_len > 56)
		fatal("connect: private data beyond what a REQ carries");
	if (failing(FAKE_CONNECT))
		return -1;
	f->state = FS_CONNECT;
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct fake_id *f = fid_of(id);

	if (f->state != FS_REQ_RCVD)
		fatal("accept of an id that has no request");
	if (!p || p->private_data_len > 196)
		fatal("accept: private data beyond what a REP carries");
	if (failing(FAKE_ACCEPT))
		return -1;
	f->state = FS_ACCEPT;
	return 0;
}

int rdma_reject(struct rdma_cm_id *id, const void *pd, uint8_t len)
{
	struct fake_id *f = fid_of(id);

	(void)pd;
	if (len > 148)
		fatal("reject: private data beyond what a REJ carries");
	/* the active side may reject a CONNECT_RESPONSE; else a request */
	if (f->state != FS_REQ_RCVD && f->state != FS_RESP_RCVD)
		fatal("reject without a request or response");
	f->state = FS_REJECTED;
	return 0;
}

int rdma_establish(struct rdma_cm_id *id)
{
	struct fake_id *f = fid_of(id);

	if (f->state != FS_RESP_RCVD)
		fatal("establish without a connect response");
	if (failing(FAKE_ESTABLISH))
		return -1;
	f->state = FS_CONNECTED;
	return 0;
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct fake_id *f = fid_of(id);

	if (f->state == FS_CONNECTED || f->state == FS_ACCEPT || f->state == FS_CONNECT ||
	    f->state == FS_RESP_RCVD)
		f->state = FS_DISCONNECT;
	return 0;
}

/* ---- the few verbs calls exsd makes: one RoCE and one iWARP device */

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(3, sizeof(*l));

	devices_init();
	if (!l)
		return NULL;
	l[0] = &devs[0];
	l[1] = &devs[1];
	if (num)
		*num = 2;
	return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	return &ctxs[d == &devs[1]];
}

int ibv_close_device(struct ibv_context *c)
{
	(void)c;
	return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	(void)c;
	(void)port;
	memset(a, 0, sizeof(struct ibv_port_attr));
	((struct ibv_port_attr *)a)->state = IBV_PORT_ACTIVE;
	return 0;
}

/* the RDMA READ depths exsd asks for (cm.c rd_depth): the RoCE device
 * allows more than exsd wants, the iWARP one less */
int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->max_qp_rd_atom = c == &ctxs[1] ? 8 : 128;
	a->max_qp_init_rd_atom = c == &ctxs[1] ? 8 : 128;
	return 0;
}

const char *ibv_get_device_name(struct ibv_device *d)
{
	return d->name;
}

int ibv_get_device_index(struct ibv_device *d)
{
	return d == &devs[1];
}

const char *ibv_port_state_str(enum ibv_port_state s)
{
	return s == IBV_PORT_ACTIVE ? "PORT_ACTIVE" : "PORT_DOWN";
}

/* ---- what the harness drives */

/* Which events a kernel could deliver for an id in state s (bit per event). */
static uint32_t allowed(const struct fake_id *f)
{
#define B(e) (1u << RDMA_CM_EVENT_##e)
	uint32_t dev = f->id.verbs ? B(DEVICE_REMOVAL) : 0;

	switch (f->state) {
	case FS_ADDR_QUERY:
		return B(ADDR_RESOLVED) | B(ADDR_ERROR);
	case FS_ROUTE_QUERY:
		return B(ROUTE_RESOLVED) | B(ROUTE_ERROR) | dev;
	case FS_LISTEN:
		return B(CONNECT_REQUEST) | dev;
	case FS_CONNECT:
		return (f->id.verbs->device->transport_type == IBV_TRANSPORT_IWARP ? B(ESTABLISHED)
										   : B(CONNECT_RESPONSE)) |
		       B(REJECTED) | B(UNREACHABLE) | B(CONNECT_ERROR) | dev;
	case FS_RESP_RCVD:
	case FS_REQ_RCVD:
	case FS_ROUTE_RESOLVED:
	case FS_ADDR_RESOLVED:
		return dev;
	case FS_ACCEPT:
		return B(ESTABLISHED) | B(CONNECT_ERROR) | B(DISCONNECTED) | dev;
	case FS_CONNECTED:
		return B(DISCONNECTED) | dev;
	case FS_DISCONNECT:
		return B(DISCONNECTED) | B(TIMEWAIT_EXIT) | dev;
	default:
		return 0;
	}
#undef B
}

static struct fake_event *queue_event(struct fake_id *f, enum rdma_cm_event_type type, int status)
{
	struct fake_event *e = calloc(1, sizeof(*e)), **p;
	uint64_t one = 1;

	if (!e)
		return NULL;
	e->fid = f;
	e->ev.id = &f->id;
	e->ev.event = type;
	e->ev.status = status;
	for (p = &queue; *p; p = &(*p)->next)
		;
	*p = e;
	if (write(chan.fd, &one, sizeof(one)) < 0)
		fatal("eventfd write");
	return e;
}

static void set_pd(struct fake_event *e, const uint8_t *pd, size_t len)
{
	if (len > sizeof(e->pd))
		len = sizeof(e->pd);
	memcpy(e->pd, pd, len);
	e->ev.param.conn.private_data = len ? e->pd : NULL;
	e->ev.param.conn.private_data_len = (uint8_t)len;
}

unsigned fake_cm_ids(void)
{
	unsigned n = 0;

	for (struct fake_id *f = ids; f; f = f->next)
		n += !f->destroyed && allowed(f);
	return n;
}

bool fake_cm_deliver(unsigned which, unsigned pick, int status, bool iwarp, const uint8_t *pd,
		     size_t pdlen)
{
	struct fake_id *f;
	struct fake_event *e;
	uint32_t ok;
	unsigned n = 0, k;
	int type;

	for (f = ids; f; f = f->next)
		if (!f->destroyed && allowed(f) && n++ == which)
			break;
	if (!f)
		return false;
	ok = allowed(f);
	k = pick % (unsigned)__builtin_popcount(ok);
	for (type = 0; type < 32; type++)
		if ((ok & (1u << type)) && k-- == 0)
			break;
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		f->id.verbs = &ctxs[iwarp];
		f->id.port_num = 1;
		f->state = FS_ADDR_RESOLVED;
		status = 0;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		f->state = FS_ROUTE_RESOLVED;
		status = 0;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
		f->state = FS_BOUND;
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		f->state = FS_ADDR_RESOLVED;
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		struct fake_id *n2 = new_id(f->id.context);

		if (!n2)
			return false;
		n2->id.context = f->id.context; /* as the kernel does: the listener's */
		n2->id.verbs = &ctxs[iwarp];
		n2->id.port_num = 1;
		n2->id.route.addr.src_addr = f->id.route.addr.src_addr;
		n2->state = FS_REQ_RCVD;
		e = queue_event(n2, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
		if (!e)
			return false;
		e->ev.listen_id = &f->id;
		set_pd(e, pd, pdlen);
		return true;
	}
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		f->state = FS_RESP_RCVD;
		status = 0;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		f->state = FS_CONNECTED;
		status = 0;
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		f->state = type == RDMA_CM_EVENT_DISCONNECTED ? FS_DISCONNECT : FS_DEAD;
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		f->state = FS_DEAD;
		break;
	default:
		return false;
	}
	e = queue_event(f, (enum rdma_cm_event_type)type, status);
	if (!e)
		return false;
	set_pd(e, pd, pdlen);
	return true;
}

/* After an input: every id exsd made must be destroyed once its owner left. */
void fake_cm_reset(void)
{
	while (queue) {
		struct fake_event *e = queue;

		queue = e->next;
		free(e);
	}
	while (ids) {
		struct fake_id *f = ids;

		ids = f->next;
		free(f);
	}
	fake_live_ids = 0;
	fail_mask = 0;
}
