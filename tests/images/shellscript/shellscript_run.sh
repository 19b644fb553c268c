#!/bin/sh
# Step of the nodewright.test/shellscript package (like upstream's shellscript package). The agent
# runs it chrooted on the host as `shellscript_run.sh <mode_with_underscores>`, e.g. `apply`,
# `apply_check`, `post_interrupt`. It sources ${SKYHOOK_DIR}/configmaps/<mode>.sh, i.e. the
# NodeWright package's configMap key `<mode>.sh`, in this shell: that script chooses what the stage
# does (print, succeed, `exit 3`, hang). A missing key is only a warning, and the step succeeds.
mode="$1"
script="${SKYHOOK_DIR}/configmaps/${mode}.sh"
if [ -f "$script" ]; then
    echo "shellscript: running ${mode}.sh from the configMap"
    . "$script"
else
    echo "WARNING: shellscript: no ${mode}.sh in the package's configMap (${script}); nothing to do" >&2
fi
