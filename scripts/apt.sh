# Sourced by the setup scripts: `apt_install LABEL PACKAGE...` installs Debian packages with
# apt-get (as root, or through sudo), and `stop_service NAME` stops the service a package may
# start where an init system runs (the tests start their own processes).
#
# `apt-get update` runs only when the last one this script ran is over an hour old, so the setup steps of one
# `scripts/test.sh` run share one update; an install that fails on lists that are stale all the
# same updates them and tries once more.

apt_sudo() {
  if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi
}

apt_install() {
  local label=$1
  shift
  # apt leaves unchanged lists untouched, so their times say nothing: a stamp of our own does.
  local stamp="${TMPDIR:-/tmp}/canvas-fleet-apt-updated"
  if [ -z "$(find "${stamp}" -mmin -60 2> /dev/null)" ]; then
    echo "${label}: apt-get update"
    apt_sudo apt-get update -q
    touch "${stamp}"
  fi
  echo "${label}: apt-get install $*"
  if ! DEBIAN_FRONTEND=noninteractive apt_sudo apt-get install -y -q --no-install-recommends "$@"; then
    echo "${label}: the install failed; updating the package lists and trying once more"
    apt_sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt_sudo apt-get install -y -q --no-install-recommends "$@"
  fi
}

stop_service() {
  if command -v systemctl > /dev/null && systemctl is-active --quiet "$1" 2> /dev/null; then
    apt_sudo systemctl stop "$1" || true
  fi
}
