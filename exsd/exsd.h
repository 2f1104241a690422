/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsd's private declarations. exsd brokers EXS connections: it owns every
 * rdmacm id (listen, resolve, connect/accept with user-managed QPs), the
 * EXS setup negotiation and the clients' control channels. It never sees
 * application data. Single-threaded: one libevent loop.
 *
 * Who calls whom (one way, top to bottom; tests/host/layers.sh checks it):
 *
 *   main.c      options, the loop, systemd, SIGHUP/SIGTERM
 *   ctl.c       the control socket: clients, reading requests, every reply
 *   cm.c        rdmacm and the connection set-up   observe.c  exsctl's queries
 *   view.c      what an observer sees of a socket, monitor events
 *   out.c config.c limits.c negotiate.c ports.c qpown.c  (each calls only below)
 *   index.c proc.c
 *   base.c      the global `exsd`, exsd_log(), now_ms(): everyone may use
 *
 * cm.c and observe.c return their results to ctl.c, which answers the
 * request; what they report unasked (a connection's progress, a query's
 * late answer, monitor events) they hand to out.c, which sends or queues it.
 */
#ifndef EXSD_H
#define EXSD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/un.h>
#include <event2/event.h>
#include <rdma/rdma_cma.h>

#include "exs_control.h"
#include "exs_limits.h"
#include "exs_wire.h"

#define EXSD_DEFAULT_SOCKET EXS_CTL_DEFAULT_SOCKET
#define EXSD_MAX_CLIENTS 1024
#define EXSD_MAX_EPS_PER_CLIENT 4096
#define EXSD_RESOLVE_MS 2000
#define EXSD_CONNECT_MS 30000
#define EXSD_QP_REBUILDS 3	/* QPs a connection's client may be asked for again (Rebuild) */
#define EXSD_DEFAULT_CREDITS 32	/* libexs's own default (EXS_DEFAULT_CREDITS) */
#define EXSD_DEFAULT_SP_MAX 1024	/* libexs's own default (EXS_DEFAULT_SP_MAX) */
#ifndef EXSD_DEFAULT_CONFIG
#define EXSD_DEFAULT_CONFIG "/etc/exs.conf" /* CMake sets SYSCONFDIR/exs.conf */
#endif
#define EXSD_CONFIG_VALUE_MAX 112	/* a value as text, the socket path included */
/* What exsd holds for a client that is slow to read its replies and events
 * (ctl.c): above HIGH bytes queued it stops reading that client's requests,
 * below LOW it reads them again; a client that takes nothing for STALL_MS
 * while over HIGH, or whose queue would pass MAX, is dropped. */
#define EXSD_OUTQ_HIGH (1u << 20)
#define EXSD_OUTQ_LOW (256u << 10)
#define EXSD_OUTQ_MAX (16u << 20)
#define EXSD_STALL_MS 10000
#define EXSD_ACCEPT_RETRY_MS 100	/* out of descriptors: try accept4 again after this */

/* base.c (the global `exsd` is declared at the end) */
enum log_level { LOG_ERR = 3, LOG_WARNING = 4, LOG_NOTICE = 5, LOG_INFO = 6, LOG_DEBUG = 7 };
void exsd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t now_ms(void);

/* Every setting of exs.conf (config.c has the keys, their bounds and docs/man
 * exs.conf.5.md what they mean). */
struct exsd_config {
	char socket[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* [daemon] */
	int log_level;
	uint32_t port_lo, port_hi;	/* [ports] ephemeral = LO-HI */
	uint32_t credits, sp_max, inline_max, stream_buffer, busy_poll_us; /* [sockets] */
	uint32_t max_clients, max_sockets, max_listeners, max_pending, connect_timeout_ms; /* [limits] */
	uint32_t reserved_clients, max_clients_per_uid, max_sockets_per_uid, max_ports_per_uid;
	uint32_t hello_timeout_ms;
};

/* config.c */
void config_defaults(struct exsd_config *c);
int config_load(struct exsd_config *c, const char *path, bool must_exist, FILE *err);
int config_set(struct exsd_config *c, const char *section, const char *name, const char *value,
	       char *err, size_t errlen);
int config_get(const struct exsd_config *c, size_t i, const char **section, const char **name,
	       char *val, size_t len);
void config_print(const struct exsd_config *c, FILE *f);
void config_log(const struct exsd_config *c);
/* Reread PATH into *c for a running exsd. A bad file leaves *c as it was
 * (FILE:LINE lines to ERR, a negative errno returned). Otherwise every
 * changed setting gets a line in LOG, the socket keeps its value (also
 * with a line when the file names another) and the count of settings
 * changed is returned. */
int config_reload(struct exsd_config *c, const char *path, bool must_exist, FILE *err, FILE *log);

/* index.c: lookups in hash tables, the ephemeral ports held in a bitmap */
struct ep;
struct client;
void index_add_id(struct ep *e);
void index_add_sock(struct ep *e);	/* (e->c, e->sock); again after a change */
void index_del_sock(struct ep *e);
void index_add_req(struct ep *e);
void index_del(struct ep *e);
struct ep *index_id(uint32_t sock_id);
struct ep *index_sock(const struct client *c, uint32_t sock);
struct ep *index_req(const struct client *c, uint32_t req);
void index_add_pair(struct ep *e);	/* once established: its addresses */
struct ep *index_twin(const struct ep *e); /* the other end, when on this host */
void index_hold_port(uint16_t port);
void index_release_port(uint16_t port);
bool index_port_held(uint16_t port);

/* ports.c */
int port_pick(uint32_t lo, uint32_t hi, uint32_t *cursor,
	      int (*try_bind)(void *arg, uint16_t port), void *arg);
/* limits.c: what each uid holds, found by uid in a hash table. Root is
 * held to none of the per-uid limits. */
struct uid_use {
	uid_t uid;
	unsigned clients, sockets, ports;
	struct uid_use *next;	/* in its hash bucket */
};
struct uid_use *uid_use_get(uid_t uid);
void uid_use_put(struct uid_use *u);
int limits_admit_client(uid_t uid, struct uid_use **ret);
void limits_client_gone(struct uid_use *u);
int limits_take_socket(struct uid_use *u);
void limits_put_socket(struct uid_use *u);
int limits_take_port(struct uid_use *u);
void limits_put_port(struct uid_use *u);

/* proc.c */
int proc_status_parse(FILE *f, const char *key, int base, uint64_t *ret);
int proc_status_field(pid_t pid, const char *key, int base, uint64_t *ret);
bool proc_has_cap(pid_t pid, unsigned cap);
bool proc_is_thread_of(pid_t pid, pid_t tid);

struct client;

/* A link in one of index.c's hash tables. */
struct hnode {
	struct hnode *next;
	uint64_t key;
	bool linked;
};
#define EXSD_HASH_BITS0 8	/* buckets a table starts with (static), 2^N */

enum ep_state {
	EP_BOUND,
	EP_LISTENING,
	EP_RESOLVING_ADDR,
	EP_RESOLVING_ROUTE,
	EP_WAIT_QP,	/* active: Route sent, waiting for the QP number */
	EP_CONNECTING,	/* active: rdma_connect() issued */
	EP_WAIT_RTR,	/* active IB/RoCE: Rtr sent, waiting for the QP in RTS */
	EP_REQUESTED,	/* passive: ConnRequest sent, waiting for accept or reject */
	EP_ACCEPTING,	/* passive: rdma_accept() issued */
	EP_ESTABLISHED,
};
const char *ep_state_name(enum ep_state s);

/* Live counters of a socket, last reported by its libexs. */
struct ep_stats {
	bool live;
	uint32_t send_used, recv_used, peer_adverts, sends_queued;
	uint64_t bytes_sent, bytes_received, sends, receives, errors;
};

/* One rdmacm id and what the EXS socket on top of it is doing. */
struct ep {
	uint32_t sock_id;	/* exsd-wide id of the socket, shown by exsctl (not an IB GID) */
	uint32_t type;		/* SOCK_STREAM / SOCK_SEQPACKET */
	uint64_t created_ms;
	struct ep_stats stats;
	struct client *c;
	uint32_t sock;		/* the libexs fd (0 and !has_sock for a fresh request) */
	bool has_sock;
	uint32_t req;		/* passive: exsd's id of the request (ConnRequest.conn) */
	struct rdma_cm_id *id;
	enum ep_state state;
	bool passive, iwarp, dead;
	uint32_t timeout_ms;	/* active: the caller's deadline for the connect; 0 none */
	uint64_t deadline_ms;	/* active: now_ms() when that deadline passes */
	uint32_t backlog, pending; /* listeners */
	bool holds_port;	/* counted in its uid's ports: bound by exsd for it */
	struct ep *listener;	/* passive: the listener it came to */
	struct exs_wire_setup offer;	/* active: ours; passive: the peer's */
	struct exs_wire_setup agreed;
	uint8_t peer_rd_in, peer_rd_out; /* passive: the request's responder_resources, initiator_depth */
	uint8_t rebuilds;	/* times its client was asked for another QP (Rebuild) */
	/* active: the QP its Connect offered before the route (Connect.early) */
	bool early;
	char early_dev[64];
	uint32_t early_port, early_qpn;
	ExsCtl__QpAttr early_init;	/* its scalars only */
	struct event *timer;
	uint16_t eph_port;	/* an ephemeral port exsd picked for it, 0 none */
	/* adopted (cm_adopt): a connection set up by an exsd that has gone
	 * since; no CM id (id NULL), so the view shows what its client said */
	bool adopted;
	char adopted_dev[64];
	struct sockaddr_storage adopted_local, adopted_peer;
	struct hnode by_id, by_sock, by_req, by_pair;	/* index.c */
	struct ep *next;	/* in the client's list */
};

/* An endpoint's addresses: an adopted connection's as its client said,
 * else its CM id's (NULL: none yet). */
static inline const struct sockaddr *ep_local_addr(const struct ep *e)
{
	return e->adopted ? (const void *)&e->adopted_local : e->id ? rdma_get_local_addr(e->id) : NULL;
}

static inline const struct sockaddr *ep_peer_addr(const struct ep *e)
{
	return e->adopted ? (const void *)&e->adopted_peer : e->id ? rdma_get_peer_addr(e->id) : NULL;
}

/* A reply or event that the client's socket could not take yet. */
struct frame {
	struct frame *next;
	size_t len;
	uint8_t data[];
};

struct client {
	int fd;
	struct event *ev;	/* readable; deleted while its output is over the high mark */
	struct event *wev;	/* writable; added while output is queued */
	struct event *timer;	/* the hello deadline, then the stall deadline */
	struct frame *outq, **outq_tail;
	size_t outq_bytes;
	bool paused;		/* not reading its requests: too much output queued */
	bool failed;		/* shut down; its read event drops it */
	const char *why;	/* why it failed */
	uint64_t progress_ms;	/* when it last took a queued frame */
	struct uid_use *u;
	uint32_t id;
	pid_t pid;
	uid_t uid;
	char comm[17];
	bool hello, observer, monitor;
	bool low_ports;		/* uid 0 or CAP_NET_BIND_SERVICE at hello: may bind < 1024 */
	bool rebuild;		/* its libexs takes Rebuild (Hello.rebuild) */
	uint64_t created_ms;
	unsigned neps;
	struct ep *eps;
	struct client *next, **pprev;
};

struct exsd {
	struct event_base *base;
	struct rdma_event_channel *cm;
	struct event *cm_ev;
	int listen_fd;
	struct event *listen_ev;
	struct event *accept_retry;	/* out of descriptors: accepting again later */
	bool accept_paused;
	unsigned accept_refusals;	/* accept4 failures in this episode */
	struct exsd_config conf;
	const char *socket_path; /* conf.socket */
	bool own_socket;
	struct client *clients;
	unsigned nclients;
	uint32_t next_client, next_req, next_ep;
	uint32_t port_cursor;	/* the last ephemeral port given out */
	unsigned nestablished;	/* connections, for systemd's STATUS= */
	struct query *queries;
	int log_level;
	bool log_prefix;
};
extern struct exsd exsd;

/* ctl.c */
int ctl_listen(void);
void ctl_shutdown(void);
void client_drop(struct client *c, const char *why);

/* out.c: every message to a client, sent or queued in order, never blocking */
void out_msg_init(ExsCtl__Msg *m);
void out_send(struct client *c, ExsCtl__Msg *m);
void out_error(struct client *c, uint32_t seq, int err, const char *text);
void out_ok(struct client *c, uint32_t seq);
void out_conn_error(struct client *c, uint32_t sock, int err);
void out_request_gone(struct client *c, uint32_t listener, uint32_t req, int err);
void out_on_writable(evutil_socket_t fd, short what, void *arg);
void out_timer(struct client *c, uint64_t ms);
void out_free(struct client *c);

/* cm.c */
int cm_open(void);
void cm_close(void);
struct ep *ep_find(struct client *c, uint32_t sock);
struct ep *ep_find_req(struct client *c, uint32_t req);
void ep_free(struct ep *e);
int cm_bind(struct client *c, ExsCtl__Bind *b);
int cm_listen(struct client *c, ExsCtl__Listen *l);
int cm_connect(struct client *c, ExsCtl__Connect *m);
int cm_qp_ready(struct client *c, ExsCtl__QpReady *m);
int cm_reject(struct client *c, ExsCtl__Reject *m);
int cm_close_sock(struct client *c, ExsCtl__Close *m);
int cm_adopt(struct client *c, ExsCtl__Adopt *m);
void cm_abort(struct ep *e, int err);
void cm_client_gone(struct client *c);

/* observe.c: exsctl's view */
int observe_query(struct client *c, uint32_t seq, ExsCtl__Query *q);
void observe_stats_reply(struct client *c, uint32_t seq, ExsCtl__StatsReply *r);
int observe_disconnect(struct client *c, ExsCtl__Disconnect *d, struct ep **ret);
void observe_monitor(struct client *c);
void observe_client_gone(struct client *c);

/* view.c: what an observer sees of a socket; monitor events */
struct info_buf { /* strings that live as long as one SockInfo being sent */
	char local[64], peer[64];
};
bool view_may_see(const struct client *observer, const struct client *owner);
void view_fill_info(ExsCtl__SockInfo *i, struct info_buf *b, const struct ep *e,
		    const struct client *observer);
bool view_watched(void);
void view_event(struct ep *e, const char *event, int err);

/* qpown.c: whether a client owns the QP it names */
int qp_owner(uint32_t dev_index, uint32_t port, uint32_t qpn, pid_t *pid);
int qp_check_owner(struct client *c, uint32_t sock, struct rdma_cm_id *id, uint32_t qpn, bool retry);
int qp_check_owner_on(struct client *c, uint32_t sock, const char *dev, int index, uint32_t port,
		      uint32_t qpn, bool retry);

/* negotiate.c */
void setup_encode(struct exs_wire_setup *w, uint8_t kind, const struct exs_wire_setup *v);
void setup_from_msg(struct exs_wire_setup *w, const ExsCtl__Setup *m);
void setup_to_msg(ExsCtl__Setup *m, const struct exs_wire_setup *w);
bool setup_within(const struct exs_wire_setup *resp, const struct exs_wire_setup *offer);
int setup_decode(const void *pd, size_t len, uint8_t kind, struct exs_wire_setup *ret);
void setup_agree(const struct exs_wire_setup *a, const struct exs_wire_setup *b,
		 struct exs_wire_setup *ret);
void reject_encode(struct exs_wire_reject *r, int err);
int reject_decode(const void *pd, size_t len);

#endif
