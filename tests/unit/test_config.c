/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsd's configuration (exsd/config.c) and port policy (exsd/ports.c):
 * defaults, every key, FILE:LINE errors, ranges, the printed form read
 * back, the ephemeral port search, and the per-uid limits (exsd/limits.c).
 */
#include "check_main.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exsd.h"

/* config_log's lines land here */
static char logged[2048];

void exsd_log(int level, const char *fmt, ...)
{
	size_t n = strlen(logged);
	va_list ap;

	(void)level;
	va_start(ap, fmt);
	vsnprintf(logged + n, sizeof(logged) - n, fmt, ap);
	va_end(ap);
	n = strlen(logged);
	snprintf(logged + n, sizeof(logged) - n, "\n");
}

static char path[64];
static char errs[4096];

/* Load `text` from a file of its own; errs gets what was reported. */
static int load(struct exsd_config *c, const char *text)
{
	FILE *err = fmemopen(errs, sizeof(errs), "w");
	int fd, ret;

	snprintf(path, sizeof(path), "/tmp/exs-conf-test.XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	config_defaults(c);
	ret = config_load(c, path, true, err);
	fclose(err);
	unlink(path);
	return ret;
}

/* errs holds "PATH:LINE: msg" for this line, with msg containing `what` */
static void ck_error(unsigned line, const char *what)
{
	char want[128];
	const char *at;

	snprintf(want, sizeof(want), "%s:%u: ", path, line);
	at = strstr(errs, want);
	ck_assert_msg(at, "no error for line %u in:\n%s", line, errs);
	at += strlen(want);
	ck_assert_msg(strstr(at, what) && strstr(at, what) < strchr(at, '\n'),
		      "line %u: want \"%s\" in:\n%s", line, what, errs);
}

START_TEST(defaults)
{
	struct exsd_config c;

	/* the defaults are today's built-in limits and libexs's own defaults */
	struct exsd_config want = {
		.socket = "/run/exs/exsd.sock", .log_level = LOG_INFO,
		.port_lo = 49152, .port_hi = 65535,
		.credits = 32, .sp_max = 1024, .inline_max = 4096, .stream_buffer = 0,
		.busy_poll_us = 1000, .max_clients = 1024, .max_sockets = 4096,
		.max_listeners = 1024, .max_pending = 4096, .connect_timeout_ms = 30000,
		.reserved_clients = 32, .max_clients_per_uid = 256, .max_sockets_per_uid = 16384,
		.max_ports_per_uid = 4096, .hello_timeout_ms = 5000,
	};

	config_defaults(&c);
	ck_assert_mem_eq(&c, &want, sizeof(c));
}
END_TEST

START_TEST(empty_and_missing_files)
{
	struct exsd_config c, d;
	FILE *err = fmemopen(errs, sizeof(errs), "w");

	config_defaults(&d);
	ck_assert_int_eq(load(&c, "# nothing\n\n; at all\n"), 0);
	ck_assert_mem_eq(&c, &d, sizeof(c));
	/* the default file may be missing; a file asked for may not */
	ck_assert_int_eq(config_load(&c, "/nonexistent/exs.conf", false, err), 0);
	ck_assert_int_eq(config_load(&c, "/nonexistent/exs.conf", true, err), -ENOENT);
	fclose(err);
	ck_assert_ptr_nonnull(strstr(errs, "/nonexistent/exs.conf: No such file or directory"));
}
END_TEST

START_TEST(every_key)
{
	struct exsd_config c;

	ck_assert_int_eq(load(&c, "[daemon]\n"
				  "socket = /tmp/x/exsd.sock\n"
				  "log_level = debug\n"
				  "[ports]\n"
				  "ephemeral = 20000-20009\n"
				  "[sockets]\n"
				  "credits = 64\n"
				  "sp_max = 512\n"
				  "inline_max = 128\n"
				  "stream_buffer = 1048576\n"
				  "busy_poll_us = 0\n"
				  "[limits]\n"
				  "max_clients = 10\n"
				  "max_sockets_per_client = 20\n"
				  "max_listeners_per_client = 3\n"
				  "max_pending_per_listener = 4\n"
				  "connect_timeout_ms = 5000   ; an inline comment\n"
				  "reserved_clients = 2\n"
				  "max_clients_per_uid = 5\n"
				  "max_sockets_per_uid = 50\n"
				  "max_ports_per_uid = 6\n"
				  "hello_timeout_ms = 700\n"),
			 0);
	ck_assert_str_eq(errs, "");
	struct exsd_config want = {
		.socket = "/tmp/x/exsd.sock", .log_level = LOG_DEBUG,
		.port_lo = 20000, .port_hi = 20009,
		.credits = 64, .sp_max = 512, .inline_max = 128, .stream_buffer = 1048576,
		.busy_poll_us = 0, .max_clients = 10, .max_sockets = 20, .max_listeners = 3,
		.max_pending = 4, .connect_timeout_ms = 5000, .reserved_clients = 2,
		.max_clients_per_uid = 5, .max_sockets_per_uid = 50, .max_ports_per_uid = 6,
		.hello_timeout_ms = 700,
	};
	ck_assert_mem_eq(&c, &want, sizeof(c));
}
END_TEST

START_TEST(log_levels)
{
	const char *names[] = { "err", "warning", "notice", "info", "debug" };
	struct exsd_config c;
	char text[64];

	for (int i = 0; i < 5; i++) {
		snprintf(text, sizeof(text), "[daemon]\nlog_level = %s\n", names[i]);
		ck_assert_int_eq(load(&c, text), 0);
		ck_assert_int_eq(c.log_level, LOG_ERR + i);
	}
	ck_assert_int_eq(load(&c, "[daemon]\nlog_level = loud\n"), -EINVAL);
	ck_error(2, "\"loud\" is not one of");
}
END_TEST

START_TEST(errors_name_file_and_line)
{
	struct exsd_config c, d;

	ck_assert_int_eq(load(&c, "credits = 4\n"                 /* 1 */
				  "[sockets]\n"                   /* 2 */
				  "credits = lots\n"              /* 3 */
				  "credit = 4\n"                  /* 4 */
				  "[network]\n"                   /* 5 */
				  "mtu = 9000\n"                  /* 6 */
				  "[sockets]\n"                   /* 7 */
				  "sp_max = -1\n"                 /* 8 */
				  "sp_max = 12x\n"                /* 9 */
				  "[limits]\n"                    /* 10 */
				  "max_clients = 99999999999\n"   /* 11 */
				  "max_clients = 5\n"             /* 12 */
				  "max_clients = 6\n"             /* 13 */
				  "[ports]\n"                     /* 14 */
				  "ephemeral = 5000\n"            /* 15 */
				  "ephemeral = a-b\n"),           /* 16 */
			 -EINVAL);
	ck_error(1, "credits: outside any [section]");
	ck_error(3, "credits: \"lots\" is not a number");
	ck_error(4, "unknown key \"credit\" in [sockets]");
	ck_error(5, "unknown section [network]"); /* its keys: no error of their own */
	ck_error(8, "sp_max: \"-1\" is not a number");
	ck_error(9, "given twice"); /* already set (wrongly) on line 8 */
	ck_error(11, "\"99999999999\" is not a number");
	ck_error(12, "max_clients: given twice in [limits]"); /* though line 11 was bad */
	ck_error(13, "max_clients: given twice in [limits]");
	ck_error(15, "not a range LOW-HIGH");
	ck_error(16, "given twice");
	/* a bad value leaves the default */
	config_defaults(&d);
	ck_assert_uint_eq(c.credits, d.credits);
	ck_assert_uint_eq(c.max_clients, d.max_clients);
}
END_TEST

START_TEST(syntax_errors)
{
	struct exsd_config c;
	char text[512];

	ck_assert_int_eq(load(&c, "[sockets]\ncredits 8\n"), -EINVAL);
	ck_error(2, "expected [section] or key = value");
	ck_assert_int_eq(load(&c, "[sockets\n"), -EINVAL);
	ck_error(1, "expected [section] or key = value");
	/* a line longer than the parser takes is an error of its own line */
	memset(text, 0, sizeof(text));
	strcpy(text, "[daemon]\nsocket = /");
	memset(text + strlen(text), 'a', 300);
	strcat(text, "\nlog_level = wrong\n");
	ck_assert_int_eq(load(&c, text), -EINVAL);
	ck_error(2, "line too long");
	ck_error(3, "is not one of"); /* the counting went on right */
	/* an indented line is taken as a continuation of the key before */
	ck_assert_int_eq(load(&c, "[sockets]\ncredits = 8\n  sp_max = 4\n"), -EINVAL);
	ck_error(3, "credits: given twice");
}
END_TEST

START_TEST(ranges)
{
	static const struct {
		const char *text;
		const char *err;
	} bad[] = {
		{ "[sockets]\ncredits = 0\n", "credits: 0 out of range (1 to 1024)" },
		{ "[sockets]\ncredits = 1025\n", "credits: 1025 out of range (1 to 1024)" },
		{ "[sockets]\nsp_max = 65537\n", "out of range (0 to 65536)" },
		{ "[sockets]\ninline_max = 4097\n", "out of range" },
		{ "[sockets]\nstream_buffer = 67108865\n", "out of range" },
		{ "[sockets]\nbusy_poll_us = 1000001\n", "out of range" },
		{ "[limits]\nmax_clients = 0\n", "out of range (1 to 65536)" },
		{ "[limits]\nmax_sockets_per_client = 65537\n", "out of range" },
		{ "[limits]\nmax_listeners_per_client = 0\n", "out of range" },
		{ "[limits]\nmax_pending_per_listener = 4097\n", "out of range (1 to 4096)" },
		{ "[limits]\nconnect_timeout_ms = 99\n", "out of range (100 to 600000)" },
		{ "[ports]\nephemeral = 1023-2000\n", "1023-2000 out of range" },
		{ "[ports]\nephemeral = 3000-2000\n", "3000-2000 out of range" },
		{ "[ports]\nephemeral = 2000-65536\n", "out of range" },
		{ "[daemon]\nsocket = relative.sock\n", "not an absolute path" },
	};
	static const char *good[] = {
		"[sockets]\ncredits = 1\n", "[sockets]\ncredits = 1024\n",
		"[sockets]\nsp_max = 65536\n", "[ports]\nephemeral = 1024-1024\n",
		"[ports]\nephemeral = 65535-65535\n", "[limits]\nconnect_timeout_ms = 600000\n",
	};
	struct exsd_config c;
	char text[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(load(&c, bad[i].text), -EINVAL);
		ck_error(2, bad[i].err);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(load(&c, good[i]) == 0, "%s: %s", good[i], errs);
	snprintf(text, sizeof(text), "[daemon]\nsocket = /%0*d\n", 107, 0);
	ck_assert_int_eq(load(&c, text), -EINVAL);
	ck_error(2, "longer than 107 bytes");
}
END_TEST

START_TEST(overrides)
{
	struct exsd_config c;
	char err[128];

	/* what exsd does with -s and -d after reading the file */
	ck_assert_int_eq(load(&c, "[daemon]\nsocket = /run/a.sock\nlog_level = err\n"), 0);
	ck_assert_int_eq(config_set(&c, "daemon", "socket", "/run/b.sock", err, sizeof(err)), 0);
	ck_assert_str_eq(c.socket, "/run/b.sock");
	ck_assert_int_eq(config_set(&c, "daemon", "log_level", "debug", err, sizeof(err)), 0);
	ck_assert_int_eq(c.log_level, LOG_DEBUG);
	ck_assert_int_eq(config_set(&c, "daemon", "socket", "b.sock", err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(c.socket, "/run/b.sock");
	ck_assert_int_eq(config_set(&c, "limits", "nope", "1", err, sizeof(err)), -ENOENT);
}
END_TEST

/* config_reload on a running configuration: `text` as the file; errs gets
 * the FILE:LINE errors and changes the lines saying what changed. */
static char changes[2048];
static int reload(struct exsd_config *c, const char *text)
{
	FILE *err, *log;
	int fd, ret;

	memset(errs, 0, sizeof(errs));
	memset(changes, 0, sizeof(changes));
	err = fmemopen(errs, sizeof(errs), "w");
	log = fmemopen(changes, sizeof(changes), "w");

	snprintf(path, sizeof(path), "/tmp/exs-conf-test.XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	ret = config_reload(c, path, true, err, log);
	fclose(err);
	fclose(log);
	unlink(path);
	return ret;
}

static int reload_missing(struct exsd_config *c)
{
	FILE *err = fmemopen(errs, sizeof(errs), "w");
	int ret = config_reload(c, "/nonexistent/exs.conf", true, err, err);

	fclose(err);
	return ret;
}

START_TEST(reload_applies_and_reports)
{
	struct exsd_config c;

	ck_assert_int_eq(load(&c, "[sockets]\ncredits = 16\n[limits]\nmax_clients = 8\n"), 0);
	/* credits and the range change, max_clients goes back to its default */
	ck_assert_int_eq(reload(&c, "[sockets]\ncredits = 64\n[ports]\nephemeral = 40000-40009\n"
				"[daemon]\nlog_level = debug\n"), 4);
	ck_assert_uint_eq(c.credits, 64);
	ck_assert_uint_eq(c.port_lo, 40000);
	ck_assert_uint_eq(c.port_hi, 40009);
	ck_assert_uint_eq(c.max_clients, 1024);
	ck_assert_int_eq(c.log_level, LOG_DEBUG);
	ck_assert_msg(strstr(changes, "[sockets] credits: 16 -> 64\n"), "%s", changes);
	ck_assert_msg(strstr(changes, "[ports] ephemeral: 49152-65535 -> 40000-40009\n"), "%s", changes);
	ck_assert_msg(strstr(changes, "[limits] max_clients: 8 -> 1024\n"), "%s", changes);
	ck_assert_msg(strstr(changes, "[daemon] log_level: info -> debug\n"), "%s", changes);
	/* the same file again: nothing changes, nothing said */
	ck_assert_int_eq(reload(&c, "[sockets]\ncredits = 64\n[ports]\nephemeral = 40000-40009\n"
				"[daemon]\nlog_level = debug\n"), 0);
	ck_assert_str_eq(changes, "");
}
END_TEST

START_TEST(reload_keeps_the_socket)
{
	struct exsd_config c;

	ck_assert_int_eq(load(&c, "[daemon]\nsocket = /run/a.sock\n"), 0);
	ck_assert_int_eq(reload(&c, "[daemon]\nsocket = /run/b.sock\n[sockets]\nsp_max = 512\n"), 1);
	ck_assert_str_eq(c.socket, "/run/a.sock");
	ck_assert_uint_eq(c.sp_max, 512);
	ck_assert_msg(strstr(changes, "[daemon] socket = /run/b.sock: cannot change while running, "
				      "keeping /run/a.sock\n"), "%s", changes);
	ck_assert_msg(strstr(changes, "[sockets] sp_max: 1024 -> 512\n"), "%s", changes);
}
END_TEST

START_TEST(reload_of_a_bad_file_changes_nothing)
{
	struct exsd_config c, before;

	ck_assert_int_eq(load(&c, "[sockets]\ncredits = 16\n"), 0);
	before = c;
	/* a good line before the bad one is not applied either */
	ck_assert_int_eq(reload(&c, "[sockets]\ncredits = 64\nbusy_poll_us = soon\n"), -EINVAL);
	ck_assert_mem_eq(&c, &before, sizeof(c));
	ck_error(3, "busy_poll_us: \"soon\" is not a number");
	ck_assert_str_eq(changes, "");
	ck_assert_int_eq(reload(&c, "[sockets\n"), -EINVAL);
	ck_assert_mem_eq(&c, &before, sizeof(c));
	ck_error(1, "expected [section] or key = value");
	/* a file that went away: also kept (must_exist, as with exsd -c) */
	ck_assert_int_eq(reload_missing(&c), -ENOENT);
	ck_assert_mem_eq(&c, &before, sizeof(c));
}
END_TEST

START_TEST(print_reads_back)
{
	struct exsd_config c, d;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_int_eq(load(&c, "[ports]\nephemeral = 30000-30100\n[sockets]\ncredits = 7\n"
				  "[daemon]\nlog_level = notice\n"),
			 0);
	config_print(&c, f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "[ports]\nephemeral = 30000-30100\n"));
	ck_assert_ptr_nonnull(strstr(text, "credits = 7\n"));
	ck_assert_int_eq(load(&d, text), 0);
	ck_assert_mem_eq(&c, &d, sizeof(c));
	free(text);
	/* the start-up log: one line per section */
	logged[0] = 0;
	config_log(&c);
	ck_assert_ptr_nonnull(strstr(logged, "config [daemon] socket=/run/exs/exsd.sock log_level=notice\n"));
	ck_assert_ptr_nonnull(strstr(logged, "config [ports] ephemeral=30000-30100\n"));
	ck_assert_ptr_nonnull(strstr(logged, "config [limits] max_clients=1024 "));
}
END_TEST

/* ---- ports.c */

static unsigned tries;
static int busy_below; /* ports below this are in use */

static int fake_bind(void *arg, uint16_t port)
{
	(void)arg;
	tries++;
	return port < busy_below ? -EADDRINUSE : 0;
}

static int fail_bind(void *arg, uint16_t port)
{
	(void)arg;
	(void)port;
	tries++;
	return -ENODEV;
}

START_TEST(ephemeral_ports)
{
	uint32_t cursor = 0;

	busy_below = 0;
	ck_assert_int_eq(port_pick(50000, 50002, &cursor, fake_bind, NULL), 50000);
	ck_assert_int_eq(port_pick(50000, 50002, &cursor, fake_bind, NULL), 50001);
	ck_assert_int_eq(port_pick(50000, 50002, &cursor, fake_bind, NULL), 50002);
	ck_assert_int_eq(port_pick(50000, 50002, &cursor, fake_bind, NULL), 50000); /* wraps */
	/* ports in use are skipped */
	busy_below = 50002;
	cursor = 0;
	tries = 0;
	ck_assert_int_eq(port_pick(50000, 50002, &cursor, fake_bind, NULL), 50002);
	ck_assert_uint_eq(tries, 3);
	/* all in use: each tried once, then EADDRNOTAVAIL */
	busy_below = 60000;
	tries = 0;
	ck_assert_int_eq(port_pick(50000, 50009, &cursor, fake_bind, NULL), -EADDRNOTAVAIL);
	ck_assert_uint_eq(tries, 10);
	/* another error ends the search */
	tries = 0;
	ck_assert_int_eq(port_pick(50000, 50009, &cursor, fail_bind, NULL), -ENODEV);
	ck_assert_uint_eq(tries, 1);
	ck_assert_int_eq(port_pick(0, 10, &cursor, fake_bind, NULL), -EINVAL);
	/* a cursor outside a new, smaller range starts at its bottom */
	busy_below = 0;
	cursor = 65535;
	ck_assert_int_eq(port_pick(1024, 1024, &cursor, fake_bind, NULL), 1024);
	ck_assert_int_eq(port_pick(1024, 1024, &cursor, fake_bind, NULL), 1024);
}
END_TEST

START_TEST(capabilities)
{
	char text[] = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000400\n"
		      "CapEff:\t0000000000000400\nCapBnd:\t000001ffffffffff\n";
	char bad[] = "Name:\tx\nCapEff:\tzz\n";
	char none[] = "Name:\tx\n";
	uint64_t eff = 0;
	FILE *f;

	f = fmemopen(text, strlen(text), "r");
	ck_assert_int_eq(proc_status_parse(f, "CapEff", 16, &eff), 0);
	fclose(f);
	ck_assert_uint_eq(eff, 1u << 10); /* CAP_NET_BIND_SERVICE alone */
	f = fmemopen(bad, strlen(bad), "r");
	ck_assert_int_eq(proc_status_parse(f, "CapEff", 16, &eff), -EINVAL);
	fclose(f);
	f = fmemopen(none, strlen(none), "r");
	ck_assert_int_eq(proc_status_parse(f, "CapEff", 16, &eff), -ENOENT);
	fclose(f);
	ck_assert(!proc_has_cap(0, 10)); /* no /proc/0 */
	ck_assert(!proc_has_cap(getpid(), 64));
}
END_TEST

struct exsd exsd;

START_TEST(per_uid_limits)
{
	struct uid_use *a[4], *r[4], *b, *x = NULL;

	config_defaults(&exsd.conf);
	exsd.conf.max_clients = 6;
	exsd.conf.reserved_clients = 2;
	exsd.conf.max_clients_per_uid = 3;
	exsd.conf.max_ports_per_uid = 2;
	exsd.conf.max_sockets_per_uid = 1;
	/* one user: three clients, then EUSERS */
	for (int i = 0; i < 3; i++, exsd.nclients++)
		ck_assert_int_eq(limits_admit_client(1000, &a[i]), 0);
	ck_assert_ptr_eq(a[0], a[2]);
	ck_assert_uint_eq(a[0]->clients, 3);
	ck_assert_int_eq(limits_admit_client(1000, &x), -EUSERS);
	ck_assert_ptr_null(x);
	/* another user: one more, then the two places kept for root */
	ck_assert_int_eq(limits_admit_client(1001, &b), 0);
	exsd.nclients++;
	ck_assert_int_eq(limits_admit_client(1002, &x), -EUSERS);
	ck_assert_ptr_null(x);
	for (int i = 0; i < 2; i++, exsd.nclients++)
		ck_assert_int_eq(limits_admit_client(0, &r[i]), 0);
	ck_assert_int_eq(limits_admit_client(0, &x), -EUSERS); /* max_clients is for root too */
	/* ports and sockets: a user is stopped at its limit, root is not */
	ck_assert_int_eq(limits_take_port(a[0]), 0);
	ck_assert_int_eq(limits_take_port(a[1]), 0);
	ck_assert_int_eq(limits_take_port(a[2]), -EADDRNOTAVAIL);
	ck_assert_int_eq(limits_take_port(b), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(limits_take_port(r[0]), 0);
	ck_assert_int_eq(limits_take_socket(a[0]), 0);
	ck_assert_int_eq(limits_take_socket(a[0]), -ENOBUFS);
	ck_assert_int_eq(limits_take_socket(r[1]), 0);
	ck_assert_int_eq(limits_take_socket(r[1]), 0);
	limits_put_port(a[0]);
	ck_assert_int_eq(limits_take_port(a[0]), 0);
	/* an entry lives while its uid holds anything */
	limits_put_port(b);
	limits_client_gone(b);
	exsd.nclients--;
	b = uid_use_get(1001);
	ck_assert_uint_eq(b->clients + b->ports + b->sockets, 0);
	uid_use_put(b);
	/* 5 clients: a user is still beyond max_clients - reserved_clients */
	ck_assert_int_eq(limits_admit_client(1001, &b), -EUSERS);
	limits_client_gone(r[0]);
	limits_client_gone(r[1]);
	exsd.nclients -= 2;
	ck_assert_int_eq(limits_admit_client(1001, &b), 0);
	ck_assert_uint_eq(b->clients, 1);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { defaults, empty_and_missing_files, every_key, log_levels,
				       errors_name_file_and_line, syntax_errors, ranges, overrides,
				       print_reads_back, reload_applies_and_reports, reload_keeps_the_socket,
				       reload_of_a_bad_file_changes_nothing, ephemeral_ports, capabilities,
				       per_uid_limits, NULL };

	return run_tests("config", 10, tests);
}
