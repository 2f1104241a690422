/*
 * exsd: the EXS connection broker. Parses options, sets up logging, the
 * libevent loop, rdmacm and the control socket, tells systemd when it is
 * really serving, and shuts down cleanly on SIGTERM/SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "exsd.h"

struct exsd exsd = { .listen_fd = -1, .log_level = LOG_INFO };

void exsd_log(int level, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	if (level > exsd.log_level)
		return;
	if (exsd.log_prefix)
		fprintf(stderr, "<%d>", level);
	else
		fprintf(stderr, "exsd: ");
	va_start(ap, fmt);
	errno = saved;
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: exsd [-s SOCKET] [-d] [-p] [-h]\n"
		   "  -s, --socket PATH  control socket (default %s)\n"
		   "  -d, --debug        log every state change\n"
		   "  -p, --print        print the effective configuration and exit\n"
		   "  -h, --help         this text\n",
		   EXSD_DEFAULT_SOCKET);
}

static void print_config(FILE *f)
{
	fprintf(f, "socket = %s\nlog_level = %s\ncontrol_protocol = %d\nwire_protocol = %d\n"
		   "max_clients = %d\nmax_sockets_per_client = %d\nconnect_timeout_ms = %d\n",
		exsd.socket_path, exsd.log_level >= LOG_DEBUG ? "debug" : "info", EXS_CTL_VERSION,
		EXS_WIRE_VERSION, EXSD_MAX_CLIENTS, EXSD_MAX_EPS_PER_CLIENT, EXSD_CONNECT_MS);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
	exsd_log(LOG_NOTICE, "signal %d, stopping", (int)sig);
	event_base_loopbreak(exsd.base);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "debug", no_argument, NULL, 'd' },
		{ "print", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct event *sigterm, *sigint;
	bool print = false;
	int o, ret;

	exsd.socket_path = getenv("EXS_SOCKET") && *getenv("EXS_SOCKET") ? getenv("EXS_SOCKET")
									 : EXSD_DEFAULT_SOCKET;
	while ((o = getopt_long(argc, argv, "s:dph", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			exsd.socket_path = optarg;
			break;
		case 'd':
			exsd.log_level = LOG_DEBUG;
			break;
		case 'p':
			print = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (print) {
		print_config(stdout);
		return 0;
	}
	/* under systemd, stderr goes to the journal, which reads <N> prefixes */
	exsd.log_prefix = getenv("JOURNAL_STREAM") != NULL;
	signal(SIGPIPE, SIG_IGN);
	exsd.base = event_base_new();
	if (!exsd.base) {
		exsd_log(LOG_ERR, "cannot create the event loop");
		return 1;
	}
	ret = cm_open();
	if (ret) {
		exsd_log(LOG_ERR, "cannot open rdmacm: %s", strerror(-ret));
		return 1;
	}
	ret = ctl_listen();
	if (ret) {
		exsd_log(LOG_ERR, "cannot listen on %s: %s", exsd.socket_path, strerror(-ret));
		return 1;
	}
	sigterm = evsignal_new(exsd.base, SIGTERM, on_signal, NULL);
	sigint = evsignal_new(exsd.base, SIGINT, on_signal, NULL);
	evsignal_add(sigterm, NULL);
	evsignal_add(sigint, NULL);
	exsd_log(LOG_INFO, "serving on %s (control protocol %d, wire protocol %d)", exsd.socket_path,
		 EXS_CTL_VERSION, EXS_WIRE_VERSION);
	sd_notify(0, "READY=1\nSTATUS=serving");
	event_base_dispatch(exsd.base);
	sd_notify(0, "STOPPING=1");
	ctl_shutdown();
	cm_close();
	event_free(sigterm);
	event_free(sigint);
	event_base_free(exsd.base);
	return 0;
}
