"""The bash program that prepares the grading tree (SWE-v0); its text is :data:`SCRIPT`.

It is kept as text in a module (packaged with the code) and written into the grading sandbox by the
grader; see the program's own comments for what it does and prints.
"""

from __future__ import annotations

__all__ = ["SCRIPT"]

SCRIPT = r'''#!/bin/bash
# Prepare the grading tree (SWE-v0): the base extracted, the agent's patch applied, the tree's changes
# listed, the hidden tests applied. Run inside the grading sandbox before any code of the repository
# runs (only tar, git and patch touch it):
#
#     bash prepare.sh REPO WORK COMMIT
#
# WORK holds base.tar and, when there are, agent.patch and test.patch. It prints one line,
#   AGENT_GYM_PREPARE <status>|<method>|<test_patch>
# status: "extracted" or "extract failed"; method: how the patch applied ("empty" without one, "git apply",
# "git apply --3way", "patch --fuzz", "failed"); test_patch: "ok", "failed" or "none". In WORK:
#   errors     what each failed way of applying said
#   changes    `git diff --raw -z` of the tree against COMMIT after `git add -A -f` (ignored and untracked
#              files count)
#   test_patch.err  what git said about the hidden tests
set -u
repo=$1 work=$2 commit=$3
cd "$repo" || exit 0
if ! tar -xf "$work/base.tar" -C "$repo" 2>"$work/errors"; then
  echo "AGENT_GYM_PREPARE extract failed|failed|none"
  exit 0
fi
rm -f "$work/base.tar"
method=empty
if [ -f "$work/agent.patch" ]; then
  method=failed
  reset() { git reset -q --hard; git clean -fdxq; }
  if git apply --binary --whitespace=nowarn "$work/agent.patch" >>"$work/errors" 2>&1; then
    method="git apply"
  else
    reset
    if git apply --binary --3way --whitespace=nowarn "$work/agent.patch" >>"$work/errors" 2>&1; then
      method="git apply --3way"
    else
      reset
      if patch -p1 --fuzz=3 --batch --forward --no-backup-if-mismatch -i "$work/agent.patch" >>"$work/errors" 2>&1; then
        method="patch --fuzz"
      else
        reset
      fi
    fi
  fi
  if [ "$method" != failed ]; then
    git add -A -f -- . >>"$work/errors" 2>&1
    git -c core.quotePath=false diff --cached --raw -z --no-renames --no-abbrev --no-ext-diff "$commit" \
      >"$work/changes" 2>>"$work/errors"
  fi
fi
test_patch=none
if [ -f "$work/test.patch" ]; then
  if git apply --binary --whitespace=nowarn "$work/test.patch" >"$work/test_patch.err" 2>&1; then
    test_patch=ok
  else
    test_patch=failed
  fi
fi
echo "AGENT_GYM_PREPARE extracted|$method|$test_patch"
'''
"""``bash prepare.sh REPO WORK COMMIT``."""
