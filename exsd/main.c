/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsd: the EXS connection broker. Parses options, sets up logging, the
 * libevent loop, rdmacm and the control socket, tells systemd when it is
 * really serving (and, while it runs, how much it serves and that it is
 * alive), rereads its configuration on SIGHUP and shuts down cleanly on
 * SIGTERM/SIGINT.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "exsd.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: exsd [-c FILE] [-s SOCKET] [-d] [-p] [-h] [--version]\n"
		   "  -c, --config FILE  configuration (default %s; a missing default is fine)\n"
		   "  -s, --socket PATH  control socket (overrides [daemon] socket and $EXS_SOCKET)\n"
		   "  -d, --debug        log every state change (log_level = debug)\n"
		   "  -p, --print        print the effective configuration and exit\n"
		   "  -h, --help         this text\n"
		   "      --version      print the version and exit\n",
		   EXSD_DEFAULT_CONFIG);
}

/* The file the configuration came from, for SIGHUP to read again; -d */
static const char *config_path;
static bool config_must_exist, config_debug;

/* Each line of text (from an open_memstream) as a log line of its own;
 * frees text. */
static void log_lines(int level, const char *prefix, char *text)
{
	char *line, *save;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save))
		exsd_log(level, "%s%s", prefix, line);
	free(text);
}

/* getopt has said what is wrong when what is NULL; exit status 2 */
static int usage_error(const char *what, const char *arg)
{
	if (what)
		fprintf(stderr, "exsd: %s '%s'\n", what, arg);
	fputs("Try 'exsd --help'.\n", stderr);
	return 2;
}

/* Configuration errors, one line each, as log lines of their own. */
static int load_config(const char *path, bool must_exist)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int ret;

	if (!f)
		return -errno;
	ret = config_load(&exsd.conf, path, must_exist, f);
	fclose(f);
	log_lines(LOG_ERR, "", text);
	return ret;
}

/* A bad configuration under socket activation: refuse the clients waiting
 * on systemd's socket. Left there, they would start exsd again at once,
 * and again, until systemd gave up on the socket too. */
static void refuse_waiting_clients(void)
{
	int fd;

	if (sd_listen_fds(0) != 1)
		return;
	fcntl(SD_LISTEN_FDS_START, F_SETFL, fcntl(SD_LISTEN_FDS_START, F_GETFL) | O_NONBLOCK);
	while ((fd = accept4(SD_LISTEN_FDS_START, NULL, NULL, SOCK_CLOEXEC)) >= 0)
		close(fd);
}

/* ---- one exsd per control socket */

/* A second exsd would unlink the live socket and bind its own, leaving the
 * first one's clients (and systemd's exsd.socket) on a dead path. So exsd
 * holds an flock on SOCKET.lock for its whole life (the file is never
 * unlinked: a new file would be a second lock), and a socket it did not
 * get from systemd must not already be answering. Returns 0 or exits. */
static int claim_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char lock[PATH_MAX], dir[PATH_MAX], pid[16] = "";
	char *slash;
	int fd, s, n;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (mkdir(dir, 0755) && errno != EEXIST)
			return -errno;
	}
	snprintf(lock, sizeof(lock), "%s.lock", path);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		n = (int)read(fd, pid, sizeof(pid) - 1);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		exsd_log(LOG_ERR, "another exsd%s%s%s serves %s (it holds %s); not starting",
			 *pid ? " (pid " : "", pid, *pid ? ")" : "", path, lock);
		exit(1);
	}
	/* for the message above, in the next exsd that tries */
	if (ftruncate(fd, 0) == 0)
		dprintf(fd, "%d\n", (int)getpid());
	if (sd_listen_fds(0) > 0 || strlen(path) >= sizeof(sa.sun_path))
		return 0; /* systemd's socket, or one ctl_listen will refuse */
	strcpy(sa.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		exsd_log(LOG_ERR, "%s is in use by another process (systemd's exsd.socket?); not starting",
			 path);
		exit(1);
	}
	if (s >= 0)
		close(s);
	return 0; /* none, or a dead one left behind: ctl_listen replaces it */
}

/* ---- systemd: STATUS= when the counts change, WATCHDOG=1 keep-alives */

static unsigned shown_clients = UINT_MAX, shown_conns = UINT_MAX;

static void on_status_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (exsd.nclients == shown_clients && exsd.nestablished == shown_conns)
		return;
	shown_clients = exsd.nclients;
	shown_conns = exsd.nestablished;
	sd_notifyf(0, "STATUS=serving %u client%s, %u connection%s", shown_clients,
		   shown_clients == 1 ? "" : "s", shown_conns, shown_conns == 1 ? "" : "s");
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	sd_notify(0, "WATCHDOG=1");
}

static struct event *every(uint64_t usec, event_callback_fn fn)
{
	struct timeval tv = { .tv_sec = (time_t)(usec / 1000000), .tv_usec = (suseconds_t)(usec % 1000000) };
	struct event *ev = event_new(exsd.base, -1, EV_PERSIST, fn, NULL);

	if (ev && event_add(ev, &tv)) {
		event_free(ev);
		ev = NULL;
	}
	return ev;
}

/* A client costs exsd a descriptor: take all the kernel lets it have (a
 * hand-started exsd's soft limit is often 1,024, below max_clients). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			exsd_log(LOG_WARNING, "cannot raise the descriptor limit, ignoring: %m");
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	exsd_log(rl.rlim_cur < (rlim_t)exsd.conf.max_clients + 64 ? LOG_WARNING : LOG_INFO,
		 "descriptor limit %llu (max_clients %u)", (unsigned long long)rl.rlim_cur,
		 exsd.conf.max_clients);
}

/*
 * SIGHUP (systemctl reload exsd): read the configuration file again. What
 * is read at each use changes at once: the defaults new clients are given,
 * the limits, the log level, the ephemeral ports of the next bind. The
 * control socket stays. A bad file changes nothing.
 */
static void on_reload(evutil_socket_t fd, short what, void *arg)
{
	char *errs = NULL, *changes = NULL;
	size_t elen = 0, clen = 0;
	FILE *err, *log;
	int ret = -ENOMEM;

	(void)fd;
	(void)what;
	(void)arg;
	sd_notify(0, "RELOADING=1\nSTATUS=reloading the configuration");
	err = open_memstream(&errs, &elen);
	log = open_memstream(&changes, &clen);
	if (err && log)
		ret = config_reload(&exsd.conf, config_path, config_must_exist, err, log);
	if (err)
		fclose(err);
	if (log)
		fclose(log);
	if (config_debug)
		exsd.conf.log_level = LOG_DEBUG;
	log_lines(LOG_ERR, "", errs);
	log_lines(LOG_NOTICE, "reload: ", changes);
	if (ret < 0)
		exsd_log(LOG_ERR, "reload: %s: %s; keeping the running configuration", config_path,
			 strerror(-ret));
	else
		exsd_log(LOG_NOTICE, "reloaded %s: %d setting%s changed", config_path, ret,
			 ret == 1 ? "" : "s");
	shown_clients = UINT_MAX; /* STATUS= again, after "reloading" */
	on_status_tick(-1, 0, NULL);
	sd_notify(0, "READY=1");
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
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "debug", no_argument, NULL, 'd' },
		{ "print", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct event *sigterm, *sigint, *sighup;
	const char *config = NULL, *sock_path = NULL;
	struct event *status_ev, *watchdog_ev = NULL;
	bool print = false, debug = false;
	uint64_t wd_usec = 0;
	char err[256];
	int o, ret;

	argv[0] = program_invocation_short_name; /* getopt's messages name it */
	while ((o = getopt_long(argc, argv, "c:s:dph", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			config = optarg;
			break;
		case 's':
			sock_path = optarg;
			break;
		case 'd':
			debug = true;
			break;
		case 'p':
			print = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("exsd (EXS) %s\n", EXS_VERSION_STRING);
			return 0;
		default:
			return usage_error(NULL, NULL);
		}
	}
	if (optind != argc)
		return usage_error("unexpected argument", argv[optind]);
	/* built-in defaults < the file < $EXS_SOCKET < the command line */
	config_defaults(&exsd.conf);
	exsd.log_prefix = getenv("JOURNAL_STREAM") != NULL;
	config_path = config ? config : EXSD_DEFAULT_CONFIG;
	config_must_exist = config != NULL;
	config_debug = debug;
	if (load_config(config_path, config_must_exist)) {
		exsd_log(LOG_ERR, "not starting: bad configuration in %s", config_path);
		refuse_waiting_clients();
		return EX_CONFIG;
	}
	if (!sock_path && getenv("EXS_SOCKET") && *getenv("EXS_SOCKET"))
		sock_path = getenv("EXS_SOCKET");
	if (sock_path && config_set(&exsd.conf, "daemon", "socket", sock_path, err, sizeof(err))) {
		exsd_log(LOG_ERR, "%s", err);
		refuse_waiting_clients();
		return EX_CONFIG;
	}
	if (debug)
		exsd.conf.log_level = LOG_DEBUG;
	exsd.socket_path = exsd.conf.socket;
	if (print) {
		config_print(&exsd.conf, stdout);
		return 0;
	}
	/* Start the ephemeral search at a random port, as the kernel does: a
	 * restarted exsd must not hand out the ports of connections that just
	 * ended (on iWARP their TCP ports may still be in TIME_WAIT). */
	if (getrandom(&exsd.port_cursor, sizeof(exsd.port_cursor), GRND_NONBLOCK) < 0)
		exsd.port_cursor = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	exsd.port_cursor = exsd.conf.port_lo + exsd.port_cursor % (exsd.conf.port_hi - exsd.conf.port_lo + 1);
	ret = claim_socket(exsd.socket_path);
	if (ret) {
		exsd_log(LOG_ERR, "cannot lock %s.lock: %s", exsd.socket_path, strerror(-ret));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
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
	sighup = evsignal_new(exsd.base, SIGHUP, on_reload, NULL);
	evsignal_add(sighup, NULL);
	config_log(&exsd.conf);
	exsd_log(LOG_INFO, "serving on %s (control protocol %d, wire protocol %d)", exsd.socket_path,
		 EXS_CTL_VERSION, EXS_WIRE_VERSION);
	sd_notify(0, "READY=1");
	on_status_tick(-1, 0, NULL);
	status_ev = every(1000000, on_status_tick);
	if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec) {
		watchdog_ev = every(wd_usec / 2, on_watchdog);
		exsd_log(LOG_INFO, "systemd watchdog: a keep-alive every %" PRIu64 " ms", wd_usec / 2000);
	}
	event_base_dispatch(exsd.base);
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	if (watchdog_ev)
		event_free(watchdog_ev);
	if (status_ev)
		event_free(status_ev);
	ctl_shutdown();
	cm_close();
	event_free(sigterm);
	event_free(sigint);
	event_free(sighup);
	event_base_free(exsd.base);
	return 0;
}
