# A content-only mixin: its filesystem is overlaid on the workload's (KIT-SPEC-V3 §4.4).
FROM scratch
COPY gh.sh /usr/local/bin/gh
