# Shared by the benchmark scripts (sourced).
# The median of the numbers on standard input, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# A / B with two decimals (0 when B is 0 or empty).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print 0; else printf "%.2f\n", a / b }'; }
