#!/usr/bin/env bash
# Samples a running process's VmRSS, RssAnon (what it allocated) and RssFile (mapped files,
# such as Tantivy's segments) every 0.5 s from /proc; prints the peaks when the process exits.
#
# Usage: scripts/bench/rss_sample.sh PID
pid=$1; peak_rss=0; peak_anon=0; peak_file=0
while [ -e /proc/$pid/status ]; do
  read -r rss anon file < <(awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {print r+0, a+0, f+0}' /proc/$pid/status 2>/dev/null)
  [ "${rss:-0}" -gt "$peak_rss" ] && peak_rss=$rss
  [ "${anon:-0}" -gt "$peak_anon" ] && peak_anon=$anon
  [ "${file:-0}" -gt "$peak_file" ] && peak_file=$file
  sleep 0.5
done
echo "peak VmRSS $((peak_rss/1024)) MB, peak RssAnon $((peak_anon/1024)) MB, peak RssFile $((peak_file/1024)) MB"
