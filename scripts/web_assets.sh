#!/usr/bin/env bash
# Local copies of the stylesheets ColBench frontend pages load from CDNs, for offline rendering
# (components/tasks/colbench_frontend/render): Tailwind 2.2.19's compiled CSS (what every reference page links, from
# jsdelivr) and the Tailwind v3 Play-CDN script with its first-party plugins (what an agent's
# `<script src="https://cdn.tailwindcss.com">` loads; npm `tailwindcss-cdn`, ISC, Tailwind MIT).
# Usage: scripts/web_assets.sh DIR   (idempotent; needs npm)
set -euo pipefail
DIR=${1:-vendor/web}
CSS="$DIR/tailwind-2.2.19.min.css"
PLAY="$DIR/tailwind-play-3.4.10.js"
[ -s "$CSS" ] && [ -s "$PLAY" ] && exit 0
command -v npm >/dev/null || { echo "error: npm is needed once to fetch the Tailwind files for page rendering (apt-get install npm)" >&2; exit 1; }
mkdir -p "$DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent tailwindcss@2.2.19 tailwindcss-cdn@3.4.10 >/dev/null)
tar -xzf "$tmp/tailwindcss-2.2.19.tgz" -C "$tmp" package/dist/tailwind.min.css
mv "$tmp/package/dist/tailwind.min.css" "$CSS.part" && mv "$CSS.part" "$CSS"
tar -xzf "$tmp/tailwindcss-cdn-3.4.10.tgz" -C "$tmp" package/3.4.10/tailwindcss-with-all-plugins.js
mv "$tmp/package/3.4.10/tailwindcss-with-all-plugins.js" "$PLAY.part" && mv "$PLAY.part" "$PLAY"
echo "web assets in $DIR: $(du -sh "$DIR" | cut -f1)"
