#!/usr/bin/env bats
# 8000-help.bats: every built tool's --help and --version against its man
# page (after git's t0450): the synopsis is the usage text, every long option
# is documented, and every man page passes mandoc -Tlint.
bats_require_minimum_version 1.5.0
load helpers

ALL_TOOLS="mlconvert mlopt mlquant mltrain mlrun mlprof"

# tools: the tools of ALL_TOOLS that build/bin holds.
tools() {
	local t
	for t in $ALL_TOOLS; do
		if [ -x "$ML_BIN/$t" ]; then
			echo "$t"
		fi
	done
}

# manpage TOOL: the page rendered as plain text.
manpage() {
	MANWIDTH=200 mandoc -Tascii -O width=200 "$ML_ROOT/man/man1/$1.1" | sed "s/.\x08//g"
}

# man_synopsis TOOL: the SYNOPSIS section of the page, on one line.
man_synopsis() {
	manpage "$1" | awk '/^[A-Z]/ { on = ($0 == "SYNOPSIS"); next } on' | tr -s ' \t\n' '   ' |
		sed 's/^ //; s/ $//'
}

# help_synopsis TOOL: the usage block at the top of --help, without "usage: ", on one line.
help_synopsis() {
	"$1" --help | awk 'NF == 0 { exit } { print }' | sed '1s/^usage: //' | tr -s ' \t\n' '   ' |
		sed 's/^ //; s/ $//'
}

@test "at least mlconvert and mlrun are built" {
	[ -x "$ML_BIN/mlconvert" ]
	[ -x "$ML_BIN/mlrun" ]
}

@test "every tool's --help and -h print usage to stdout and exit 0" {
	for t in $(tools); do
		run -0 --separate-stderr "$t" --help
		[[ ${lines[0]} == "usage: $t "* ]] || { echo "$t: ${lines[0]}" >&2; return 1; }
		[ -z "$stderr" ]
		[ "${#lines[@]}" -gt 3 ]
		help=$output
		run -0 --separate-stderr "$t" -h
		[ "$output" = "$help" ]
	done
}

@test "every tool has a man page" {
	for t in $(tools); do
		[ -f "$ML_ROOT/man/man1/$t.1" ] || { echo "no man/man1/$t.1" >&2; return 1; }
	done
}

@test "the first lines of --help equal the SYNOPSIS of the man page" {
	for t in $(tools); do
		h=$(help_synopsis "$t")
		m=$(man_synopsis "$t")
		if [ "$h" != "$m" ]; then
			printf '%s --help: %s\n%s.1:     %s\n' "$t" "$h" "$t" "$m" >&2
			return 1
		fi
	done
}

@test "every --long option of --help appears in the man page" {
	for t in $(tools); do
		page=$(manpage "$t")
		for o in $("$t" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
			if [[ $page != *"$o"* ]]; then
				echo "$t: $o is not in man/man1/$t.1" >&2
				return 1
			fi
		done
	done
}

@test "every option in the man page's OPTIONS is in --help" {
	for t in $(tools); do
		help=$("$t" --help)
		opts=$(manpage "$t" | awk '/^[A-Z]/ { on = ($0 == "OPTIONS"); next } on' |
			grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
		for o in $opts; do
			if [[ $help != *"$o"* ]]; then
				echo "$t: $o of $t.1 is not in --help" >&2
				return 1
			fi
		done
	done
}

@test "every tool's man page has the house sections" {
	for t in $(tools); do
		heads=$(manpage "$t" | grep -E '^[A-Z][A-Z ]+$' | tr '\n' ,)
		want="NAME,SYNOPSIS,DESCRIPTION,OPTIONS,EXIT STATUS,ENVIRONMENT,FILES,EXAMPLES,SEE ALSO,"
		if [ "$heads" != "$want" ]; then
			echo "$t.1 sections: $heads" >&2
			return 1
		fi
	done
}

@test "every tool's --version prints 'TOOL (ml) 0.4.0'" {
	for t in $(tools); do
		run -0 --separate-stderr "$t" --version
		[ "$output" = "$t (ml) 0.4.0" ] || { echo "$t: $output" >&2; return 1; }
		run -0 --separate-stderr "$t" -V
		[ "$output" = "$t (ml) 0.4.0" ]
	done
}

@test "every tool's --help to /dev/full fails with status 1" {
	for t in $(tools); do
		run -1 --separate-stderr sh -c "$t --help >/dev/full"
		[[ $stderr == "$t: "* ]] || { echo "$t: $stderr" >&2; return 1; }
	done
}

@test "mandoc -Tlint passes on every man page" {
	command -v mandoc >/dev/null || skip "mandoc is not installed"
	for p in "$ML_ROOT"/man/man1/*.1 "$ML_ROOT"/man/man5/*.5; do
		run -0 mandoc -Tlint -W warning "$p"
		[ -z "$output" ] || { echo "$output" >&2; return 1; }
	done
}

@test "the man5 page documents the mlg file format" {
	[ -f "$ML_ROOT/man/man5/mlg.5" ]
	page=$(MANWIDTH=200 mandoc -Tascii "$ML_ROOT/man/man5/mlg.5" | sed "s/.\x08//g")
	[[ $page == *MLG* ]]
	[[ $page == *zstd* ]]
	[[ $page == *"message Graph"* ]]
}
