/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exsd's configuration: /etc/exs.conf (docs/man/exs.conf.5.md), parsed
 * with libinih. Every setting lives in struct exsd_config with its default
 * and its bounds in the table below; the same table drives the parser,
 * `exsd -p`, the start-up log line and `exsctl config`. Each bad line is
 * reported as FILE:LINE: message, and any of them makes loading fail.
 */
#include <errno.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exsd.h"

enum conf_type { CT_PATH, CT_LEVEL, CT_RANGE, CT_UINT };

struct conf_key {
	const char *section, *name;
	enum conf_type type;
	size_t off; /* into struct exsd_config; CT_RANGE: two uint32_t */
	uint32_t min, max;
};

#define K(sec, key, type, field, min, max) \
	{ sec, key, type, offsetof(struct exsd_config, field), min, max }
static const struct conf_key keys[] = {
	K("daemon", "socket", CT_PATH, socket, 0, 0),
	K("daemon", "log_level", CT_LEVEL, log_level, LOG_ERR, LOG_DEBUG),
	K("ports", "ephemeral", CT_RANGE, port_lo, 1024, 65535),
	K("sockets", "credits", CT_UINT, credits, 1, EXS_LIMIT_CREDITS),
	K("sockets", "sp_max", CT_UINT, sp_max, 0, 65536),
	K("sockets", "inline_max", CT_UINT, inline_max, 0, 4096),
	K("sockets", "stream_buffer", CT_UINT, stream_buffer, 0, 64 << 20),
	K("sockets", "busy_poll_us", CT_UINT, busy_poll_us, 0, 1000000),
	K("limits", "max_clients", CT_UINT, max_clients, 1, 65536),
	K("limits", "max_sockets_per_client", CT_UINT, max_sockets, 1, 65536),
	K("limits", "max_listeners_per_client", CT_UINT, max_listeners, 1, 65536),
	K("limits", "max_pending_per_listener", CT_UINT, max_pending, 1, 4096),
	K("limits", "connect_timeout_ms", CT_UINT, connect_timeout_ms, 100, 600000),
	K("limits", "reserved_clients", CT_UINT, reserved_clients, 0, 65536),
	K("limits", "max_clients_per_uid", CT_UINT, max_clients_per_uid, 1, 65536),
	K("limits", "max_sockets_per_uid", CT_UINT, max_sockets_per_uid, 1, 1 << 20),
	K("limits", "max_ports_per_uid", CT_UINT, max_ports_per_uid, 1, 65536),
	K("limits", "hello_timeout_ms", CT_UINT, hello_timeout_ms, 100, 600000),
};
#undef K
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static const char *const levels[] = {
	[LOG_ERR] = "err", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

void config_defaults(struct exsd_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->socket, sizeof(c->socket), "%s", EXSD_DEFAULT_SOCKET);
	c->log_level = LOG_INFO;
	c->port_lo = 49152; /* IANA's dynamic range, as Linux TCP uses by default */
	c->port_hi = 65535;
	c->credits = EXSD_DEFAULT_CREDITS;
	c->sp_max = EXSD_DEFAULT_SP_MAX;
	c->busy_poll_us = 1000;
	c->inline_max = 4096; /* libexs lowers it to what the device takes */
	c->max_clients = EXSD_MAX_CLIENTS;
	c->max_sockets = EXSD_MAX_EPS_PER_CLIENT;
	c->max_listeners = 1024;
	c->max_pending = 4096;
	c->connect_timeout_ms = EXSD_CONNECT_MS;
	c->reserved_clients = 32;
	c->max_clients_per_uid = 256;
	c->max_sockets_per_uid = 16384;
	c->max_ports_per_uid = 4096;	/* a quarter of the default ephemeral range */
	c->hello_timeout_ms = 5000;
}

/* A whole decimal number, no sign; -EINVAL when it is not one. */
static int parse_u32(const char *s, uint32_t *ret)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (*end || errno || v > UINT32_MAX)
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

static int set_value(struct exsd_config *c, const struct conf_key *k, const char *v,
		     char *err, size_t errlen)
{
	uint32_t *u = (uint32_t *)((char *)c + k->off);
	uint32_t a, b;
	const char *dash;
	char lo[16];

	switch (k->type) {
	case CT_PATH:
		if (v[0] != '/') {
			snprintf(err, errlen, "%s: not an absolute path", k->name);
			return -EINVAL;
		}
		if (strlen(v) >= sizeof(c->socket)) {
			snprintf(err, errlen, "%s: longer than %zu bytes", k->name, sizeof(c->socket) - 1);
			return -ENAMETOOLONG;
		}
		memset(c->socket, 0, sizeof(c->socket));
		memcpy(c->socket, v, strlen(v));
		return 0;
	case CT_LEVEL:
		for (int l = LOG_ERR; l <= LOG_DEBUG; l++)
			if (!strcmp(v, levels[l])) {
				c->log_level = l;
				return 0;
			}
		snprintf(err, errlen, "%s: \"%s\" is not one of err, warning, notice, info, debug",
			 k->name, v);
		return -EINVAL;
	case CT_RANGE:
		dash = strchr(v, '-');
		if (!dash || (size_t)(dash - v) >= sizeof(lo)) {
			snprintf(err, errlen, "%s: \"%s\" is not a range LOW-HIGH", k->name, v);
			return -EINVAL;
		}
		memcpy(lo, v, (size_t)(dash - v));
		lo[dash - v] = 0;
		if (parse_u32(lo, &a) || parse_u32(dash + 1, &b)) {
			snprintf(err, errlen, "%s: \"%s\" is not a range LOW-HIGH", k->name, v);
			return -EINVAL;
		}
		if (a < k->min || b > k->max || a > b) {
			snprintf(err, errlen, "%s: %u-%u out of range (%u <= LOW <= HIGH <= %u)",
				 k->name, a, b, k->min, k->max);
			return -ERANGE;
		}
		u[0] = a;
		u[1] = b;
		return 0;
	case CT_UINT:
		if (parse_u32(v, &a)) {
			snprintf(err, errlen, "%s: \"%s\" is not a number", k->name, v);
			return -EINVAL;
		}
		if (a < k->min || a > k->max) {
			snprintf(err, errlen, "%s: %u out of range (%u to %u)", k->name, a, k->min, k->max);
			return -ERANGE;
		}
		*u = a;
		return 0;
	}
	return -EINVAL;
}

int config_set(struct exsd_config *c, const char *section, const char *name, const char *value,
	       char *err, size_t errlen)
{
	bool known_section = false;

	for (size_t i = 0; i < NKEYS; i++) {
		if (strcmp(section, keys[i].section))
			continue;
		known_section = true;
		if (!strcmp(name, keys[i].name))
			return set_value(c, &keys[i], value, err, errlen);
	}
	if (!*section)
		snprintf(err, errlen, "%s: outside any [section]", name);
	else if (known_section)
		snprintf(err, errlen, "unknown key \"%s\" in [%s]", name, section);
	else
		snprintf(err, errlen, "unknown section [%s]", section);
	return -ENOENT;
}

int config_get(const struct exsd_config *c, size_t i, const char **section, const char **name,
	       char *val, size_t len)
{
	const struct conf_key *k = &keys[i];
	const uint32_t *u;

	if (i >= NKEYS)
		return -ENOENT;
	u = (const uint32_t *)((const char *)c + k->off);
	*section = k->section;
	*name = k->name;
	switch (k->type) {
	case CT_PATH:
		snprintf(val, len, "%s", c->socket);
		break;
	case CT_LEVEL:
		snprintf(val, len, "%s", levels[c->log_level]);
		break;
	case CT_RANGE:
		snprintf(val, len, "%u-%u", u[0], u[1]);
		break;
	case CT_UINT:
		snprintf(val, len, "%u", *u);
		break;
	}
	return 0;
}

void config_print(const struct exsd_config *c, FILE *f)
{
	const char *sec, *name, *prev = NULL;
	char val[EXSD_CONFIG_VALUE_MAX];

	for (size_t i = 0; !config_get(c, i, &sec, &name, val, sizeof(val)); i++) {
		if (!prev || strcmp(prev, sec))
			fprintf(f, "%s[%s]\n", prev ? "\n" : "", sec);
		prev = sec;
		fprintf(f, "%s = %s\n", name, val);
	}
}

void config_log(const struct exsd_config *c)
{
	const char *sec, *name, *prev = NULL;
	char val[EXSD_CONFIG_VALUE_MAX], line[512];
	size_t n = 0;

	for (size_t i = 0;; i++) {
		int end = config_get(c, i, &sec, &name, val, sizeof(val));

		if (prev && (end || strcmp(prev, sec))) {
			exsd_log(LOG_INFO, "config [%s]%s", prev, line);
			n = 0;
		}
		if (end)
			break;
		prev = sec;
		if (n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%s", name, val);
	}
}

/* ---- the file */

struct parse {
	FILE *f, *err;
	const char *path;
	struct exsd_config *c;
	unsigned line, errors;
	bool seen[NKEYS];
};

static void report(struct parse *p, const char *msg)
{
	fprintf(p->err, "%s:%u: %s\n", p->path, p->line, msg);
	p->errors++;
}

static bool section_known(const char *section)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (!strcmp(section, keys[i].section))
			return true;
	return false;
}

/* inih calls the handler for keys only, so an unknown [section] is caught
 * here, on its own line, even when no key follows it. */
static void check_section(struct parse *p, const char *line)
{
	char name[64];
	const char *end;

	line += strspn(line, " \t");
	if (*line != '[' || !(end = strchr(line, ']')) || (size_t)(end - line - 1) >= sizeof(name))
		return; /* not a header, or one inih itself refuses */
	snprintf(name, sizeof(name), "%.*s", (int)(end - line - 1), line + 1);
	if (!section_known(name)) {
		char err[96];

		snprintf(err, sizeof(err), "unknown section [%s]", name);
		report(p, err);
	}
}

/* inih's reader: one whole line per call, so that p->line is the line the
 * handler is called for; a line too long for inih's buffer is an error. */
static char *read_line(char *str, int num, void *stream)
{
	struct parse *p = stream;
	size_t n;
	int ch;

	if (!fgets(str, num, p->f))
		return NULL;
	p->line++;
	n = strlen(str);
	if (n && str[n - 1] != '\n' && !feof(p->f)) {
		while ((ch = fgetc(p->f)) != EOF && ch != '\n')
			;
		report(p, "line too long");
		str[0] = 0; /* an empty line to inih */
	}
	check_section(p, str);
	return str;
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
	struct parse *p = user;
	char err[256];

	if (*section && !section_known(section))
		return 1; /* reported once, at its [header] */
	for (size_t i = 0; i < NKEYS; i++)
		if (!strcmp(section, keys[i].section) && !strcmp(name, keys[i].name)) {
			/* also catches an indented line, which inih takes as a
			 * continuation of the key before it */
			if (p->seen[i]) {
				snprintf(err, sizeof(err), "%s: given twice in [%s]", name, section);
				report(p, err);
				return 1;
			}
			p->seen[i] = true;
		}
	if (config_set(p->c, section, name, value, err, sizeof(err)))
		report(p, err);
	return 1; /* keep going: every bad line is reported */
}

int config_load(struct exsd_config *c, const char *path, bool must_exist, FILE *err)
{
	struct parse p = { .err = err, .path = path, .c = c };
	int ret;

	p.f = fopen(path, "re");
	if (!p.f) {
		ret = -errno;
		if (ret == -ENOENT && !must_exist)
			return 0;
		fprintf(err, "%s: %s\n", path, strerror(-ret));
		return ret;
	}
	ret = ini_parse_stream(read_line, &p, on_key, &p);
	fclose(p.f);
	if (ret > 0) {
		/* the first line inih could not read as [section] or key = value */
		p.line = (unsigned)ret;
		report(&p, "expected [section] or key = value");
	} else if (ret < 0) {
		fprintf(err, "%s: cannot parse (%d)\n", path, ret);
		return -EIO;
	}
	return p.errors ? -EINVAL : 0;
}

/* ---- rereading the file while exsd runs */

int config_reload(struct exsd_config *c, const char *path, bool must_exist, FILE *err, FILE *log)
{
	const char *sec, *name, *sec2, *name2;
	char was[EXSD_CONFIG_VALUE_MAX], now[EXSD_CONFIG_VALUE_MAX];
	struct exsd_config n;
	int ret, changed = 0;

	config_defaults(&n);
	ret = config_load(&n, path, must_exist, err);
	if (ret)
		return ret;
	for (size_t i = 0; !config_get(c, i, &sec, &name, was, sizeof(was)); i++) {
		config_get(&n, i, &sec2, &name2, now, sizeof(now));
		if (!strcmp(was, now))
			continue;
		if (keys[i].type == CT_PATH) {
			/* the control socket is bound, or systemd's: it stays */
			fprintf(log, "[%s] %s = %s: cannot change while running, keeping %s\n",
				sec, name, now, was);
			continue;
		}
		fprintf(log, "[%s] %s: %s -> %s\n", sec, name, was, now);
		changed++;
	}
	memcpy(n.socket, c->socket, sizeof(n.socket));
	*c = n;
	return changed;
}
