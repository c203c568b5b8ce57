/*
 * The timeline of a run as CSV and as an SVG chart: two panels sharing the
 * time axis; on top the dirty pages against the thresholds (MiB), below
 * each device's measured throughput, write bandwidth estimate and dirty
 * rate limit (MB/s).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "svg.h"

FILE *out_fopen(const char *path, bool nofollow)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0),
		      0666);
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return f;
}

int trace_csv(const char *path, bool nofollow, const struct sample *s, size_t n)
{
	FILE *f = out_fopen(path, nofollow);
	if (!f)
		return -errno;
	fprintf(f, "t_s,dirty_mib,writeback_mib,bg_thresh_mib,freerun_mib,setpoint_mib,limit_mib,pause_ms");
	unsigned nd = n ? s[0].ndev : 0;
	for (unsigned d = 0; d < nd; d++)
		fprintf(f, ",dev%u_dirty_mib,dev%u_writeback_mib,dev%u_write_bw_mbs,"
			"dev%u_dirty_ratelimit_mbs,dev%u_throughput_mbs", d, d, d, d, d);
	fprintf(f, ",ops_per_s,lock_max_us\n");
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%.6f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f", s[i].t, s[i].dirty,
			s[i].writeback, s[i].bg_thresh, s[i].freerun, s[i].setpoint, s[i].limit,
			s[i].pause_ms);
		for (unsigned d = 0; d < nd; d++)
			fprintf(f, ",%.3f,%.3f,%.1f,%.1f,%.1f", s[i].dev[d].dirty, s[i].dev[d].writeback,
				s[i].dev[d].write_bw, s[i].dev[d].ratelimit, s[i].dev[d].tput);
		fprintf(f, ",%.1f,%.2f\n", s[i].ops_rate, s[i].lock_max_us);
	}
	errno = EIO;   /* a write that failed before (ferror) may leave none */
	return (ferror(f) | fclose(f)) ? -errno : 0;
}

/* a "nice" tick step for a range */
static double tick_step(double range)
{
	double raw = range / 5, mag = pow(10, floor(log10(raw > 0 ? raw : 1)));
	double r = raw / mag;
	return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

/* A tick's label on an axis up to @max: 1e+06 for a million was what %g
 * wrote; 1M now, and 250k for 250000, one unit for the whole axis (from
 * five digits on).  The origin is 0 on every axis (it read "0k", "0M"). */
static const char *tick_label(char *buf, size_t size, double v, double max)
{
	if (v == 0) {
		snprintf(buf, size, "0");
		return buf;
	}
	static const struct { double at; const char *unit; } u[] = {
		{ 1e12, "T" }, { 1e9, "G" }, { 1e6, "M" }, { 1e4, "k" },
	};
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		if (max >= u[i].at) {
			double d = u[i].at == 1e4 ? 1e3 : u[i].at;
			snprintf(buf, size, "%g%s", v / d, u[i].unit);
			return buf;
		}
	snprintf(buf, size, "%g", v);
	return buf;
}

double svg_x(const struct panel *p, double t) { return p->x0 + t / p->tmax * p->w; }
double svg_y(const struct panel *p, double v) { return p->y0 + p->h - v / p->vmax * p->h; }

void svg_axes(FILE *f, const struct panel *p, const char *ylabel)
{
	fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#444'/>\n",
		p->x0, p->y0, p->w, p->h);
	char lb[32];
	/* each tick a multiple of the step (a sum of steps drifts) */
	double ts = tick_step(p->tmax);
	for (unsigned i = 0; i * ts <= p->tmax + 1e-9; i++) {
		double t = i * ts;
		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>"
			"<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%s</text>\n",
			svg_x(p, t), p->y0, svg_x(p, t), p->y0 + p->h, svg_x(p, t), p->y0 + p->h + 14,
			tick_label(lb, sizeof(lb), t, p->tmax));
	}
	double vs = tick_step(p->vmax);
	for (unsigned i = 0; i * vs <= p->vmax + 1e-9; i++) {
		double v = i * vs;
		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>"
			"<text x='%.1f' y='%.1f' font-size='11' text-anchor='end'>%s</text>\n",
			p->x0, svg_y(p, v), p->x0 + p->w, svg_y(p, v), p->x0 - 4, svg_y(p, v) + 4,
			tick_label(lb, sizeof(lb), v, p->vmax));
	}
	fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' transform='rotate(-90 %.1f %.1f)' "
		"text-anchor='middle'>%s</text>\n", p->x0 - 42, p->y0 + p->h / 2, p->x0 - 42,
		p->y0 + p->h / 2, ylabel);
	fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>time (s)</text>\n",
		p->x0 + p->w / 2, p->y0 + p->h + 30);
}

void svg_polyline(FILE *f, const struct panel *p, const double *t, const double *v, size_t n,
		  const char *color, const char *dash)
{
	fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.6'%s points='", color, dash);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%.1f,%.1f ", svg_x(p, t[i]), svg_y(p, v[i] > p->vmax ? p->vmax : v[i]));
	fprintf(f, "'/>\n");
}

/* The length of the well-formed UTF-8 sequence at @s, or 0 (RFC 3629:
 * no overlong form, no surrogate, nothing past U+10FFFF). */
int utf8_len(const unsigned char *s)
{
	int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 :
		s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
	unsigned char lo = s[0] == 0xe0 ? 0xa0 : s[0] == 0xf0 ? 0x90 : 0x80;
	unsigned char hi = s[0] == 0xed ? 0x9f : s[0] == 0xf4 ? 0x8f : 0xbf;
	for (int i = 1; i < n; i++)
		if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
			return 0;
	return n;
}

void svg_text(FILE *f, const char *s, size_t max)
{
	/* at most @max bytes, but a UTF-8 sequence whole (a cut one made the
	 * file invalid XML); a byte that is not part of well-formed UTF-8 (a
	 * device spec is any bytes the shell passed) becomes U+FFFD, as the
	 * document says it is UTF-8 (a byte 0xff made it invalid XML) */
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0, n; u[i] && i < max; i += n) {
		n = 1;
		switch (u[i]) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '\'': fputs("&apos;", f); break;
		case '"': fputs("&quot;", f); break;
		default:
			if (u[i] < 0x80) {
				if (u[i] >= 0x20)
					fputc(u[i], f);
			} else if ((n = (size_t)utf8_len(u + i))) {
				fwrite(u + i, 1, n, f);
			} else {
				fputs("\xef\xbf\xbd", f);   /* U+FFFD */
				n = 1;
			}
		}
	}
}

void svg_begin(FILE *f, double w, double h, const char *title)
{
	fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n"
		"<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
		"font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n", w, h);
	fprintf(f, "<text x='%g' y='22' font-size='14' text-anchor='middle'>", w / 2);
	svg_text(f, title, SIZE_MAX);
	fprintf(f, "</text>\n");
}

typedef double (*getter)(const struct sample *s, unsigned d);

static void line(FILE *f, const struct panel *p, const struct sample *s, size_t n, getter g,
		 unsigned d, const char *color, const char *dash)
{
	fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.6'%s points='", color, dash);
	for (size_t i = 0; i < n; i++) {
		double v = g(&s[i], d);
		fprintf(f, "%.1f,%.1f ", svg_x(p, s[i].t), svg_y(p, v > p->vmax ? p->vmax : v));
	}
	fprintf(f, "'/>\n");
}

void svg_legend(FILE *f, double x, double y, const char *color, const char *dash, const char *label)
{
	fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2'%s/>"
		"<text x='%.1f' y='%.1f' font-size='11'>", x, y, x + 22, y, color, dash, x + 27, y + 4);
	svg_text(f, label, SIZE_MAX);
	fprintf(f, "</text>\n");
}

static double g_total(const struct sample *s, unsigned d) { (void)d; return s->dirty + s->writeback; }
static double g_dirty(const struct sample *s, unsigned d) { (void)d; return s->dirty; }
static double g_wb(const struct sample *s, unsigned d) { (void)d; return s->writeback; }
static double g_bg(const struct sample *s, unsigned d) { (void)d; return s->bg_thresh; }
static double g_free(const struct sample *s, unsigned d) { (void)d; return s->freerun; }
static double g_set(const struct sample *s, unsigned d) { (void)d; return s->setpoint; }
static double g_lim(const struct sample *s, unsigned d) { (void)d; return s->limit; }
static double g_tput(const struct sample *s, unsigned d) { return s->dev[d].tput; }
static double g_bw(const struct sample *s, unsigned d) { return s->dev[d].write_bw; }
static double g_rl(const struct sample *s, unsigned d) { return s->dev[d].ratelimit; }

int plot_svg(const char *path, bool nofollow, const char *title, const struct sample *s,
	     size_t n, const char *const *dev_names)
{
	if (!n)
		return -EINVAL;
	FILE *f = out_fopen(path, nofollow);
	if (!f)
		return -errno;
	/* the bottom panel's legend has 66 px a device: the canvas grows for
	 * it (16 devices drew labels at y=1350 of 640) */
	const double W = 900, H = fmax(640, 370 + 66.0 * s[0].ndev);
	struct panel top = { 70, 40, 640, 250, s[n - 1].t > 0 ? s[n - 1].t : 1, 1 };
	struct panel bot = { 70, 350, 640, 230, top.tmax, 1 };
	for (size_t i = 0; i < n; i++) {
		top.vmax = fmax(top.vmax, fmax(s[i].limit, s[i].dirty + s[i].writeback));
		for (unsigned d = 0; d < s[i].ndev; d++)
			bot.vmax = fmax(bot.vmax, fmax(s[i].dev[d].tput,
				       fmax(s[i].dev[d].write_bw, s[i].dev[d].ratelimit)));
	}
	top.vmax *= 1.1;
	bot.vmax *= 1.1;
	svg_begin(f, W, H, title);
	svg_axes(f, &top, "MiB");
	svg_axes(f, &bot, "MB/s");
	const char *dash = " stroke-dasharray='5,3'", *dot = " stroke-dasharray='2,3'";
	line(f, &top, s, n, g_lim, 0, "#d62728", "");
	line(f, &top, s, n, g_set, 0, "#ff7f0e", dash);
	line(f, &top, s, n, g_free, 0, "#8c564b", dot);
	line(f, &top, s, n, g_bg, 0, "#7f7f7f", dash);
	line(f, &top, s, n, g_wb, 0, "#2ca02c", "");
	line(f, &top, s, n, g_dirty, 0, "#9467bd", "");
	line(f, &top, s, n, g_total, 0, "#1f77b4", "");
	double lx = top.x0 + top.w + 14, ly = top.y0 + 10;
	svg_legend(f, lx, ly, "#1f77b4", "", "dirty + writeback");
	svg_legend(f, lx, ly + 18, "#9467bd", "", "dirty");
	svg_legend(f, lx, ly + 36, "#2ca02c", "", "writeback");
	svg_legend(f, lx, ly + 54, "#d62728", "", "limit");
	svg_legend(f, lx, ly + 72, "#ff7f0e", dash, "setpoint");
	svg_legend(f, lx, ly + 90, "#8c564b", dot, "freerun");
	svg_legend(f, lx, ly + 108, "#7f7f7f", dash, "bg_thresh");
	static const char *colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
					"#8c564b", "#e377c2", "#17becf" };
	ly = bot.y0 + 10;
	for (unsigned d = 0; d < s[0].ndev; d++) {
		const char *col = colors[d % 8];
		line(f, &bot, s, n, g_tput, d, col, "");
		line(f, &bot, s, n, g_bw, d, col, dash);
		line(f, &bot, s, n, g_rl, d, col, dot);
		fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' font-weight='bold'>", lx, ly);
		svg_text(f, dev_names[d], 30);
		fprintf(f, "</text>\n");
		svg_legend(f, lx, ly + 14, col, "", "throughput");
		svg_legend(f, lx, ly + 30, col, dash, "write_bw");
		svg_legend(f, lx, ly + 46, col, dot, "dirty_ratelimit");
		ly += 66;
	}
	fprintf(f, "</svg>\n");
	errno = EIO;
	return (ferror(f) | fclose(f)) ? -errno : 0;
}
