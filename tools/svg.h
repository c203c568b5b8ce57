/* The SVG pieces the run's chart (plot.c) and the lab's charts share:
 * a panel with its axes and ticks, a legend entry, a polyline. */
#ifndef WBC_TOOLS_SVG_H
#define WBC_TOOLS_SVG_H
#include <stddef.h>
#include <stdio.h>

struct panel {
	double x0, y0, w, h;      /* pixels */
	double tmax, vmax;
};

double svg_x(const struct panel *p, double t);
double svg_y(const struct panel *p, double v);
/* the frame, grid lines and ticks of @p, "time (s)" below it */
void svg_axes(FILE *f, const struct panel *p, const char *ylabel);
void svg_legend(FILE *f, double x, double y, const char *color, const char *dash,
		const char *label);
/* the points (t[i], v[i]), values above the panel's top drawn at it */
void svg_polyline(FILE *f, const struct panel *p, const double *t, const double *v, size_t n,
		  const char *color, const char *dash);
/* @s as SVG text (XML-escaped), at most @max characters */
void svg_text(FILE *f, const char *s, size_t max);
/* the document's start (white background, @title centred on top) */
void svg_begin(FILE *f, double w, double h, const char *title);
#endif
