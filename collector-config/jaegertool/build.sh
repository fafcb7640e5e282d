#!/usr/bin/env bash
# Builds the Jaeger v2 binary (an OpenTelemetry Collector distribution) from
# this tool module, once per version, into a cache outside the repository,
# and prints its path. The first build takes several minutes; later calls
# return at once. Jaeger lives in its own module because it does not build
# beside the otel version sessionwire uses.
set -euo pipefail
cd "$(dirname "$0")"
version=$(go list -m -f '{{.Version}}' github.com/jaegertracing/jaeger)
cache="${SESSIONWIRE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sessionwire}/jaeger-$version"
bin="$cache/jaeger"
if [ ! -x "$bin" ]; then
  mkdir -p "$cache"
  echo "building jaeger $version into $cache (first time only, several minutes)" >&2
  go build -trimpath -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
