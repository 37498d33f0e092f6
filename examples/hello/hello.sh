#!/bin/bash
# Prints what the sandbox looks like from inside: who it runs as, what it can write, its limits.
set -u
echo "hello from sbx: uid=$(id -u) gid=$(id -g) workspace=${SBX_WORKSPACE:-?}"
if touch /sbx-root-write-probe 2>/dev/null; then echo "root filesystem: WRITABLE"; else echo "root filesystem: read-only"; fi
echo "capabilities (effective): $(awk '/^CapEff/ {print $2}' /proc/self/status)"
echo "workspace entries: $(ls -A "${SBX_WORKSPACE:-.}" 2>/dev/null | wc -l)"
if [ -r /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  echo "memory limit: $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) bytes"
elif [ -r /sys/fs/cgroup/memory.max ]; then
  echo "memory limit: $(cat /sys/fs/cgroup/memory.max) bytes"
fi
if getent hosts localhost >/dev/null 2>&1 && ip route 2>/dev/null | grep -q default; then echo "network: present"; else echo "network: none"; fi
