# Shared by scripts/test and scripts/bench: run Go as the unprivileged test
# user, the way the server is deployed (root hides permission bugs and
# makes user namespaces behave differently).
#
# The checkout may live where that user cannot read (CI clones as root
# into a 0700 home), so the tree is staged into a directory the user owns.

TEST_USER=${CODUMENTOR_TEST_USER:-codumentor-test}
TEST_HOME=/var/tmp/codumentor-test
STAGE=$TEST_HOME/src

# stage_tree ROOT [DEST] copies the working tree (tracked and untracked
# files, as they are now, without .git) to DEST (default $STAGE), owned by
# the test user.
stage_tree() {
	local root=$1 dest=${2:-$STAGE}
	mkdir -p "$TEST_HOME"
	chown "$TEST_USER": "$TEST_HOME"
	chmod 0755 "$TEST_HOME"
	rm -rf "$dest"
	mkdir -p "$dest"
	# stat drops what is tracked but deleted in the work tree (and then
	# exits 123, which is no failure here).
	(cd "$root" && git ls-files -z --cached --others --exclude-standard |
		{ xargs -0 -r stat --printf '%n\0' 2>/dev/null || [ $? -eq 123 ]; } |
		tar --null -T - -cf -) | tar -C "$dest" -xf -
	chown -R "$TEST_USER": "$dest"
}

# as_test_user runs a command as the test user with a clean environment:
# its own Go caches, the Go toolchain and bwrap on PATH, and CI passed on.
as_test_user() {
	local gobin
	gobin=$(dirname "$(command -v go)")
	runuser -u "$TEST_USER" -- env -i \
		PATH="$gobin:/usr/local/bin:/usr/bin:/bin" \
		HOME="$TEST_HOME" \
		USER="$TEST_USER" \
		LANG=C.UTF-8 \
		TMPDIR=/tmp \
		GOPATH="$TEST_HOME/go" \
		GOCACHE="$TEST_HOME/cache" \
		GOTOOLCHAIN=local \
		GOFLAGS="${GOFLAGS:-}" \
		GOPROXY="${GOPROXY:-$(go env GOPROXY)}" \
		GONOSUMDB="${GONOSUMDB:-}" GOPRIVATE="${GOPRIVATE:-}" \
		CI="${CI:-}" \
		CODUMENTOR_TEST_STORE="${CODUMENTOR_TEST_STORE:-}" \
		SANDBOXTEST_OLD_BWRAP="${SANDBOXTEST_OLD_BWRAP:-${CODUMENTOR_PREREQ_STATE:-/var/cache/codumentor-prereqs}/bwrap-0.8.0/usr/bin/bwrap}" \
		"$@"
}

# go_packages lists the package patterns of every workspace module, and
# the programs under testdata/ (which ./... leaves out).
go_packages() {
	echo ./... ./sandboxkit/... ./agentcore/... ./testdata/llmserver
}
