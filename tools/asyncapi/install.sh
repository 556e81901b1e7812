#!/bin/sh
# Install the AsyncAPI CLI pinned by tools/asyncapi/package-lock.json at $1 (.venv/asyncapi).
#
# The installed tree is 1.5 GB in some 30,000 files: writing it took 40-60 s of every fresh
# clone's `make test`, on the cores the pip install and then the tests want. It is the same
# tree for the same lock file, so it is written once per machine, in the user's cache
# (${XDG_CACHE_HOME:-~/.cache}/habitus/asyncapi-<lock digest>), and each clone links to it: a
# lock file that changes gets a tree of its own. Where the cache cannot be written, the tree is
# installed in the clone as before. Deleting the cache directory is always safe.
set -eu
dest=$1
here=$(dirname "$0")
digest=$(sha256sum "$here/package-lock.json" | cut -c1-16)
cache_home="${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}"  # empty with neither set: no cache
root="${cache_home:+$cache_home/habitus}"

install_into() {  # a complete tree at $1, or nothing there
    rm -rf "$1.partial" && mkdir -p "$1.partial"
    cp "$here/package.json" "$here/package-lock.json" "$1.partial/"
    npm ci --prefix "$1.partial" --no-audit --no-fund --loglevel=error
    touch "$1.partial/.installed"
    rm -rf "$1" && mv "$1.partial" "$1"
}

rm -rf "$dest"
if [ -n "$root" ] && command -v flock >/dev/null 2>&1 && mkdir -p "$root" 2>/dev/null \
        && [ -w "$root" ]; then
    shared="$root/asyncapi-$digest"
    (
        flock 9  # two clones installing at once: one writes, the other waits and links
        [ -f "$shared/.installed" ] || install_into "$shared"
    ) 9>"$shared.lock"
    ln -s "$shared" "$dest"
else
    install_into "$dest"
fi
