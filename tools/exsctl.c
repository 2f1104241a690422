/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsctl: inspect what EXS is doing on this host, by asking exsd.
 *
 *   exsctl [-j] [-p] [-H] [-s SOCKET] OBJECT [FILTER VALUE]...
 *   objects: conns (connections), listeners, ports, clients, devices,
 *            config, monitor, disconnect ID
 *
 * Every field goes through one printer, driven by the protobuf descriptor
 * of the message exsd sent, so the text columns, the JSON keys and the
 * filter names can never drift apart: a filter names a JSON key (plus
 * `port`, which matches local_port or peer_port).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "exs_control.h"

static bool opt_json, opt_pretty, opt_noheader;
static const char *opt_socket;
static int ctl_fd = -1;
static uint32_t seq;

struct filter {
	const char *key, *value;
};

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "exsctl: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(1);
}

/* One line (none when getopt has said what is wrong), a hint, status 2. */
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	if (fmt) {
		fputs("exsctl: ", stderr);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	fputs("Try 'exsctl --help'.\n", stderr);
	return 2;
}

/* ---- the channel */

static void msg_init(ExsCtl__Msg *m)
{
	exs_ctl__msg__init(m);
	m->version = EXS_CTL_VERSION;
	m->seq = ++seq;
}

/* The channel failed: exsd's reason if it sent one before it closed (a
 * refused client, exs.conf(5) [limits]), else `what`. Exits 1. */
static void channel_lost(const char *what, int err)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	ExsCtl__Msg *m;
	ssize_t n;

	/* a reset is reported before the data queued ahead of it: try again */
	n = recv(ctl_fd, buf, sizeof(buf), MSG_DONTWAIT);
	m = n > 0 ? exs_ctl__msg__unpack(NULL, (size_t)n, buf) : NULL;
	if (m && m->body_case == EXS_CTL__MSG__BODY_ERROR && m->error->text)
		die("exsd: %s", m->error->text);
	snprintf((char *)buf, sizeof(buf), "%s%s", what, strerror(err));
	die("%s", (char *)buf);
}

static void send_msg(ExsCtl__Msg *m)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	size_t n = exs_ctl__msg__get_packed_size(m);

	exs_ctl__msg__pack(m, buf);
	if (send(ctl_fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		channel_lost("exsd went away: ", errno);
}

/* The next message, an Error included. */
static ExsCtl__Msg *recv_any(void)
{
	uint8_t buf[EXS_CTL_MAX_MSG];
	ExsCtl__Msg *m;
	ssize_t n = recv(ctl_fd, buf, sizeof(buf), 0);

	if (n < 0)
		channel_lost("exsd closed the connection with an error: ", errno);
	if (n == 0)
		die("exsd closed the connection%s", "");
	m = exs_ctl__msg__unpack(NULL, (size_t)n, buf);
	if (!m)
		die("undecodable message from exsd%s", "");
	return m;
}

/* The next message; an Error exits 1 with exsd's reason. */
static ExsCtl__Msg *recv_msg(void)
{
	ExsCtl__Msg *m = recv_any();

	if (m->body_case == EXS_CTL__MSG__BODY_ERROR) {
		fprintf(stderr, "exsctl: exsd: %s\n", m->error->text);
		exit(1);
	}
	return m;
}

static void connect_exsd(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	ExsCtl__Msg m, *r;
	ExsCtl__Hello h = EXS_CTL__HELLO__INIT;
	struct timeval tv = { 5, 0 };

	if (strlen(opt_socket) >= sizeof(sa.sun_path))
		die("socket path too long: %s", opt_socket);
	strcpy(sa.sun_path, opt_socket);
	ctl_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (ctl_fd < 0 || connect(ctl_fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "exsctl: cannot reach exsd at %s: %s (is exsd running?)\n", opt_socket,
			strerror(errno));
		exit(1);
	}
	setsockopt(ctl_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	msg_init(&m);
	h.pid = (uint32_t)getpid();
	h.comm = "exsctl";
	h.observer = true;
	m.body_case = EXS_CTL__MSG__BODY_HELLO;
	m.hello = &h;
	send_msg(&m);
	r = recv_msg();
	if (r->version != EXS_CTL_VERSION)
		die("exsd speaks another control protocol version%s", "");
	exs_ctl__msg__free_unpacked(r, NULL);
}

/* ---- the one printer */

struct row {
	const ProtobufCMessage *msg;
};

static bool is_hidden_field(const ProtobufCMessage *m, const char *key)
{
	static const char *const secret[] = { "pid", "comm", "live", "send_credits_used",
		"recv_credits_used", "peer_adverts", "sends_queued", "bytes_sent", "bytes_received",
		"sends", "receives", "errors", NULL };
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "hidden");

	if (!f || !*(const protobuf_c_boolean *)((const char *)m + f->offset))
		return false;
	for (int i = 0; secret[i]; i++)
		if (!strcmp(key, secret[i]))
			return true;
	return false;
}

/* The field as text; *ret_quote says whether JSON wants it quoted. */
static const char *field_text(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			      char *buf, size_t len, bool *ret_quote)
{
	const char *p = (const char *)m + f->offset;

	*ret_quote = false;
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING:
		*ret_quote = true;
		return *(char *const *)p ? *(char *const *)p : "";
	case PROTOBUF_C_TYPE_BOOL:
		return *(const protobuf_c_boolean *)p ? "true" : "false";
	case PROTOBUF_C_TYPE_INT32:
		snprintf(buf, len, "%d", *(const int32_t *)p);
		return buf;
	case PROTOBUF_C_TYPE_UINT32:
		snprintf(buf, len, "%u", *(const uint32_t *)p);
		return buf;
	case PROTOBUF_C_TYPE_UINT64:
		snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p);
		return buf;
	default:
		return NULL; /* nested messages are printed by their own rows */
	}
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_json_object(const ProtobufCMessage *m, const char *indent)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	bool first = true;

	putchar('{');
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		char buf[32];
		bool quote;
		const char *v = field_text(m, f, buf, sizeof(buf), &quote);

		if (!v || is_hidden_field(m, f->name))
			continue;
		printf("%s%s", first ? "" : ",", opt_pretty ? "\n" : "");
		if (opt_pretty)
			printf("%s    ", indent);
		json_string(f->name);
		printf(opt_pretty ? ": " : ":");
		if (quote)
			json_string(v);
		else
			fputs(v, stdout);
		first = false;
	}
	if (opt_pretty)
		printf("\n%s  ", indent);
	putchar('}');
}

/* columns: JSON keys, in the order and under the headers text shows */
struct column {
	const char *key, *header;
};

static const struct column conn_cols[] = {
	{ "id", "ID" }, { "state", "State" }, { "type", "Type" }, { "local", "Local" },
	{ "peer", "Peer" }, { "device", "Dev" }, { "transport", "Transport" }, { "pid", "PID" },
	{ "comm", "Comm" }, { "credits", "Cred" }, { "send_credits_used", "SCrUsed" },
	{ "recv_credits_used", "Adverts" }, { "peer_adverts", "PeerAdv" },
	{ "sends_queued", "SendQ" }, { "bytes_sent", "BytesOut" }, { "sends", "Sends" },
	{ "bytes_received", "BytesIn" }, { "receives", "Recvs" }, { "errors", "Err" },
	{ "age_ms", "Age(ms)" }, { NULL, NULL } };
static const struct column listener_cols[] = {
	{ "id", "ID" }, { "local", "Local" }, { "type", "Type" }, { "backlog", "Backlog" },
	{ "pending", "Pending" }, { "pid", "PID" }, { "comm", "Comm" }, { "uid", "UID" },
	{ "age_ms", "Age(ms)" }, { NULL, NULL } };
static const struct column port_cols[] = {
	{ "local_port", "Port" }, { "local", "Local" }, { "state", "State" }, { "type", "Type" },
	{ "id", "ID" }, { "pid", "PID" }, { "comm", "Comm" }, { "uid", "UID" }, { NULL, NULL } };
static const struct column client_cols[] = {
	{ "id", "ID" }, { "pid", "PID" }, { "uid", "UID" }, { "comm", "Comm" },
	{ "observer", "Observer" }, { "sockets", "Sockets" }, { "listeners", "Listeners" },
	{ "connections", "Conns" }, { "age_ms", "Age(ms)" }, { NULL, NULL } };
static const struct column device_cols[] = {
	{ "name", "Device" }, { "transport", "Transport" }, { "port", "Port" }, { "state", "State" },
	{ "active_mtu", "MTU" }, { "max_msg_sz", "MaxMsg" }, { NULL, NULL } };
static const struct column config_cols[] = { { "key", "Key" }, { "value", "Value" }, { NULL, NULL } };

static const char *cell(const ProtobufCMessage *m, const char *key, char *buf, size_t len)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field_by_name(m->descriptor, key);
	bool quote;
	const char *v;

	if (!f || is_hidden_field(m, key))
		return "-";
	v = field_text(m, f, buf, len, &quote);
	return v && *v ? v : "-";
}

static void print_rows(const ProtobufCMessage **rows, size_t n, const struct column *cols)
{
	size_t ncol = 0, w[32] = { 0 };
	char buf[64];

	if (opt_json) {
		printf("[");
		for (size_t r = 0; r < n; r++) {
			printf("%s%s", r ? "," : "", opt_pretty ? "\n  " : "");
			print_json_object(rows[r], "");
		}
		printf("%s]\n", opt_pretty && n ? "\n" : "");
		return;
	}
	while (cols[ncol].key)
		ncol++;
	for (size_t c = 0; c < ncol; c++) {
		w[c] = opt_noheader ? 0 : strlen(cols[c].header);
		for (size_t r = 0; r < n; r++) {
			size_t l = strlen(cell(rows[r], cols[c].key, buf, sizeof(buf)));

			if (l > w[c])
				w[c] = l;
		}
	}
	/* the last column is not padded: no trailing blanks */
	if (!opt_noheader) {
		for (size_t c = 0; c < ncol; c++)
			printf("%-*s%s", c + 1 < ncol ? (int)w[c] : 0, cols[c].header,
			       c + 1 < ncol ? " " : "\n");
	}
	for (size_t r = 0; r < n; r++)
		for (size_t c = 0; c < ncol; c++)
			printf("%-*s%s", c + 1 < ncol ? (int)w[c] : 0,
			       cell(rows[r], cols[c].key, buf, sizeof(buf)), c + 1 < ncol ? " " : "\n");
}

/* ---- filters: key value pairs against the JSON keys */

static bool row_matches(const ProtobufCMessage *m, const struct filter *fl, size_t nf)
{
	char buf[64];

	for (size_t i = 0; i < nf; i++) {
		if (!strcmp(fl[i].key, "port")) {
			if (strcmp(cell(m, "local_port", buf, sizeof(buf)), fl[i].value) &&
			    strcmp(cell(m, "peer_port", buf, sizeof(buf)), fl[i].value))
				return false;
			continue;
		}
		if (strcmp(cell(m, fl[i].key, buf, sizeof(buf)), fl[i].value))
			return false;
	}
	return true;
}

static void check_filters(const ProtobufCMessageDescriptor *d, const struct filter *fl, size_t nf)
{
	for (size_t i = 0; i < nf; i++) {
		if (!strcmp(fl[i].key, "port") && protobuf_c_message_descriptor_get_field_by_name(d, "local_port"))
			continue;
		if (!protobuf_c_message_descriptor_get_field_by_name(d, fl[i].key)) {
			fprintf(stderr, "exsctl: no field '%s' to filter on; fields:", fl[i].key);
			for (unsigned k = 0; k < d->n_fields; k++)
				fprintf(stderr, " %s", d->fields[k].name);
			fputc('\n', stderr);
			exit(usage_error(NULL));
		}
	}
}

/* ---- objects */

static int cmd_query(ExsCtl__Query__What what, const struct column *cols, const struct filter *fl,
		     size_t nf)
{
	ExsCtl__Msg m, *r;
	ExsCtl__Query q = EXS_CTL__QUERY__INIT;
	ExsCtl__Msg **replies = NULL;
	const ProtobufCMessage **rows = NULL;
	size_t nrep = 0, nrows = 0;
	const ProtobufCMessageDescriptor *d =
		what == EXS_CTL__QUERY__WHAT__CLIENTS ? &exs_ctl__client_info__descriptor
		: what == EXS_CTL__QUERY__WHAT__DEVICES ? &exs_ctl__device_info__descriptor
		: what == EXS_CTL__QUERY__WHAT__CONFIG ? &exs_ctl__config_item__descriptor
		: &exs_ctl__sock_info__descriptor;

	check_filters(d, fl, nf);
	connect_exsd();
	msg_init(&m);
	q.what = what;
	m.body_case = EXS_CTL__MSG__BODY_QUERY;
	m.query = &q;
	send_msg(&m);
	do {
		r = recv_msg();
		if (r->body_case != EXS_CTL__MSG__BODY_QUERY_REPLY || r->seq != m.seq)
			die("unexpected answer from exsd%s", "");
		replies = realloc(replies, (nrep + 1) * sizeof(*replies));
		replies[nrep++] = r;
		ExsCtl__QueryReply *qr = r->query_reply;
		size_t add = qr->n_socks + qr->n_clients + qr->n_devices + qr->n_config;
		rows = realloc(rows, (nrows + add) * sizeof(*rows));
		for (size_t k = 0; k < qr->n_socks; k++)
			if (row_matches(&qr->socks[k]->base, fl, nf))
				rows[nrows++] = &qr->socks[k]->base;
		for (size_t k = 0; k < qr->n_clients; k++)
			if (row_matches(&qr->clients[k]->base, fl, nf))
				rows[nrows++] = &qr->clients[k]->base;
		for (size_t k = 0; k < qr->n_devices; k++)
			if (row_matches(&qr->devices[k]->base, fl, nf))
				rows[nrows++] = &qr->devices[k]->base;
		for (size_t k = 0; k < qr->n_config; k++)
			if (row_matches(&qr->config[k]->base, fl, nf))
				rows[nrows++] = &qr->config[k]->base;
	} while (r->query_reply->more);
	print_rows(rows, nrows, cols);
	for (size_t k = 0; k < nrep; k++)
		exs_ctl__msg__free_unpacked(replies[k], NULL);
	free(replies);
	free(rows);
	return 0;
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int cmd_monitor(const struct filter *fl, size_t nf)
{
	ExsCtl__Msg m, *r;
	ExsCtl__Monitor mon = EXS_CTL__MONITOR__INIT;
	struct sigaction sa = { .sa_handler = on_signal };
	struct timeval tv = { 0, 0 };
	char buf[64], idbuf[32];

	check_filters(&exs_ctl__sock_info__descriptor, fl, nf);
	connect_exsd();
	setsockopt(ctl_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	msg_init(&m);
	m.body_case = EXS_CTL__MSG__BODY_MONITOR;
	m.monitor = &mon;
	send_msg(&m);
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!stop) {
		uint8_t raw[EXS_CTL_MAX_MSG];
		ssize_t n = recv(ctl_fd, raw, sizeof(raw), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("exsd went away%s", "");
		r = exs_ctl__msg__unpack(NULL, (size_t)n, raw);
		if (!r)
			die("undecodable message from exsd%s", "");
		if (r->body_case == EXS_CTL__MSG__BODY_MONITOR_EVENT && r->monitor_event->sock &&
		    row_matches(&r->monitor_event->sock->base, fl, nf)) {
			ExsCtl__MonitorEvent *e = r->monitor_event;
			const ProtobufCMessage *s = &e->sock->base;

			if (opt_json) {
				printf("{\"time_ms\":%llu,\"event\":", (unsigned long long)e->time_ms);
				json_string(e->event);
				printf(",\"error\":");
				json_string(e->error);
				printf(",\"sock\":");
				print_json_object(s, "");
				printf("}\n");
			} else {
				time_t t = (time_t)(e->time_ms / 1000);
				struct tm tm;
				char ts[32];

				localtime_r(&t, &tm);
				strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
				/* a buffer per cell: both are evaluated before printf runs */
				printf("%s.%03u %-10s id %s %s %s -> %s %s %s pid %s %s%s%s\n", ts,
				       (unsigned)(e->time_ms % 1000), e->event, cell(s, "id", idbuf, sizeof(idbuf)),
				       e->sock->type, e->sock->local, e->sock->peer, e->sock->device,
				       e->sock->transport, e->sock->hidden ? "-" : cell(s, "pid", buf, sizeof(buf)),
				       e->sock->hidden ? "-" : e->sock->comm, *e->error ? ": " : "", e->error);
			}
		}
		exs_ctl__msg__free_unpacked(r, NULL);
	}
	return 0;
}

static int cmd_disconnect(const char *id)
{
	ExsCtl__Msg m, *r;
	ExsCtl__Disconnect d = EXS_CTL__DISCONNECT__INIT;
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(id, &end, 10);
	if (*id < '0' || *id > '9' || *end || errno || v > UINT32_MAX)
		exit(usage_error("not a connection id: '%s'", id));
	d.id = (uint32_t)v;
	connect_exsd();
	msg_init(&m);
	m.body_case = EXS_CTL__MSG__BODY_DISCONNECT;
	m.disconnect = &d;
	send_msg(&m);
	r = recv_any();
	if (r->body_case == EXS_CTL__MSG__BODY_ERROR) {
		/* exsd's ENOENT would read "No such file or directory" */
		if (r->error->err == ENOENT)
			fprintf(stderr, "exsctl: no connection %s (see exsctl conns)\n", id);
		else
			fprintf(stderr, "exsctl: cannot disconnect %s: %s\n", id, r->error->text);
		return 1;
	}
	exs_ctl__msg__free_unpacked(r, NULL);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: exsctl [-j] [-p] [-H] [-s SOCKET] OBJECT [FILTER VALUE]...\n"
		   "objects:\n"
		   "  conns | connections   live connections, with counters from their owners\n"
		   "  listeners             listening sockets\n"
		   "  ports                 the EXS ports in use\n"
		   "  clients               processes connected to exsd\n"
		   "  devices               RDMA devices exsd can use\n"
		   "  config                exsd's effective configuration\n"
		   "  monitor               stream listen/connect/accept/close/disconnect/error events\n"
		   "  disconnect ID         abort a connection (root or its owner)\n"
		   "filters are JSON keys (e.g. pid 123, state established, device rxe0);\n"
		   "`port N` matches local_port or peer_port.\n"
		   "  -j  JSON   -p  pretty JSON   -H  no header   -s  exsd's socket (default %s)\n"
		   "  -h, --help  this text   --version  print the version\n",
		EXS_CTL_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' }, { "pretty", no_argument, NULL, 'p' },
		{ "no-header", no_argument, NULL, 'H' }, { "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct filter fl[16];
	size_t nf = 0;
	const char *obj;
	int o;

	opt_socket = getenv("EXS_SOCKET") && *getenv("EXS_SOCKET") ? getenv("EXS_SOCKET")
								  : EXS_CTL_DEFAULT_SOCKET;
	argv[0] = program_invocation_short_name; /* getopt's messages name it */
	while ((o = getopt_long(argc, argv, "+jpHs:h", opts, NULL)) != -1) {
		switch (o) {
		case 'j': opt_json = true; break;
		case 'p': opt_json = opt_pretty = true; break;
		case 'H': opt_noheader = true; break;
		case 's': opt_socket = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("exsctl (EXS) %s\n", EXS_VERSION_STRING); return 0;
		default: return usage_error(NULL);
		}
	}
	if (optind >= argc)
		return usage_error("no object given");
	obj = argv[optind++];
	if (!strcmp(obj, "disconnect")) {
		if (optind + 1 != argc)
			return usage_error("disconnect takes one connection id");
		return cmd_disconnect(argv[optind]);
	}
	if ((argc - optind) % 2 || (size_t)(argc - optind) / 2 > sizeof(fl) / sizeof(fl[0]))
		return usage_error("filters come in pairs: KEY VALUE");
	for (; optind < argc; optind += 2)
		fl[nf++] = (struct filter){ argv[optind], argv[optind + 1] };
	if (!strcmp(obj, "conns") || !strcmp(obj, "connections"))
		return cmd_query(EXS_CTL__QUERY__WHAT__CONNS, conn_cols, fl, nf);
	if (!strcmp(obj, "listeners"))
		return cmd_query(EXS_CTL__QUERY__WHAT__LISTENERS, listener_cols, fl, nf);
	if (!strcmp(obj, "ports"))
		return cmd_query(EXS_CTL__QUERY__WHAT__PORTS, port_cols, fl, nf);
	if (!strcmp(obj, "clients"))
		return cmd_query(EXS_CTL__QUERY__WHAT__CLIENTS, client_cols, fl, nf);
	if (!strcmp(obj, "devices"))
		return cmd_query(EXS_CTL__QUERY__WHAT__DEVICES, device_cols, fl, nf);
	if (!strcmp(obj, "config"))
		return cmd_query(EXS_CTL__QUERY__WHAT__CONFIG, config_cols, fl, nf);
	if (!strcmp(obj, "monitor"))
		return cmd_monitor(fl, nf);
	return usage_error("unknown object '%s'", obj);
}
