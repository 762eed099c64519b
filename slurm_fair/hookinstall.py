"""Installing the Slurm hooks: copy the shim and ``jobrecord.py`` into a folder, write its ``hooks.conf``, chain
a site's own hook programs after the record, and take it all away again (stdlib only, runnable by path).

Split from ``jobrecord.py`` so that the file Slurm runs on every job start and end holds only what a hook call
needs. Like it, this module imports nothing outside the standard library: the testbed runs
``python3 -I -S slurm_fair/hookinstall.py install DEST ...`` without the package installed, and
``slurm-fair hooks install`` / ``uninstall`` call :func:`install` / :func:`uninstall`.
"""

from __future__ import annotations

import os
import sys

try:
    from . import jobrecord as J
except ImportError:  # run by path: no package (with -I, Python does not put this folder on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jobrecord as J  # type: ignore[no-redef]


NODE_KEYS = ("Prolog", "Epilog")  # opt-in: a node without the shim (or its python3) would fail its prolog and drain


def slurm_conf_lines(dest: str, node_hooks: bool = False) -> str:
    """The slurm.conf lines for the shim in ``dest``: the controller hooks, and the node hooks with
    ``node_hooks`` (only where every node has the shim at that path and a python3 >= 3.9)."""
    shim = os.path.join(dest, J.SHIM_NAME)
    return "".join(f"{k}={shim}\n" for k in J.SLURM_CONF_KEYS if node_hooks or k not in NODE_KEYS)


def make_spool(spool: str, owner: str = "", group: str = "") -> None:
    """Create the spool for the two-user setup: owned by ``owner`` (SlurmUser: the controller hooks run as it)
    and ``group`` (the daemon's group: it reads and removes the records), mode 2770 (the records inherit the
    group). Without owner/group: created 0755 for the user installing (one user runs hooks and daemon).
    Raises ValueError naming an unknown user or group."""
    import grp
    import pwd

    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else -1
    except KeyError:
        raise ValueError(f"--owner: no such user (got {owner!r})") from None
    try:
        gid = grp.getgrnam(group).gr_gid if group else -1
    except KeyError:
        raise ValueError(f"--group: no such group (got {group!r})") from None
    os.makedirs(spool, mode=0o755, exist_ok=True)
    if owner or group:
        os.chown(spool, uid, gid)
        os.chmod(spool, 0o2770)


CHAIN_DIR = "chain"  # DEST/chain/<context>: links to the site's own hook programs, run after the record


def chain_context(key: str) -> str:
    """The Slurm context of a chain key: a slurm.conf key (PrologSlurmctld, ...) or a context name."""
    if key in J.SLURM_CONF_KEYS:
        return J.SLURM_CONF_KEYS[key]
    if key in J.CONTEXTS:
        return key
    raise ValueError(f"--chain: {key!r} is not one of {', '.join(J.SLURM_CONF_KEYS)} (got {key!r})")


def _check_program(context: str, program: str, shim: str) -> None:
    if not os.path.isabs(program) or any(c in program for c in "*?[\n\r"):
        raise ValueError(f"--chain: {context}: must be one absolute path, not a pattern (got {program!r}); "
                         "a Prolog/Epilog folder (Prolog=/etc/slurm/prolog.d/*) can hold a link to the shim "
                         "instead")
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise ValueError(f"--chain: {context}: not an executable file (got {program!r})")
    if os.path.realpath(program) == os.path.realpath(shim) or os.path.basename(program) == J.SHIM_NAME:
        raise ValueError(f"--chain: {context}: that is slurm-fair's own hook (got {program!r}): it would run "
                         "itself")


def chained(dest: str) -> dict[str, str]:
    """context -> the site program chained after the record in ``dest`` (absent: none)."""
    folder = os.path.join(dest, CHAIN_DIR)
    out = {}
    for c in J.CONTEXTS:
        link = os.path.join(folder, c)
        if os.path.islink(link):
            out[c] = os.readlink(link)
    return out


def _set_chain(dest: str, chain: dict[str, str]) -> None:
    folder = os.path.join(dest, CHAIN_DIR)
    shim = os.path.join(dest, J.SHIM_NAME)
    todo = {chain_context(k): v for k, v in chain.items()}
    for c, program in todo.items():
        if program:
            _check_program(c, program, shim)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    for c, program in sorted(todo.items()):
        link = os.path.join(folder, c)
        if not program:
            if os.path.lexists(link):
                os.unlink(link)
            continue
        tmp = os.path.join(folder, f".{c}.tmp")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(program, tmp)
        os.replace(tmp, link)


def install(dest: str, spool: str = J.DEFAULT_SPOOL, slurm_conf: str = "", log: str = "",
            source: str | None = None, chain: dict[str, str] | None = None, owner: str = "", group: str = "",
            node_hooks: bool = False) -> str:
    """Copy the shim and ``jobrecord.py`` into ``dest``, write ``dest/hooks.conf``, create the spool; returns
    the slurm.conf lines to add. ``source`` is the folder holding the shim (default: the package's ``share/``,
    shipped in the wheel). ``chain``: slurm.conf key (or context) -> the site's own program for that hook, run
    by the shim after the record (``""`` removes a chain; chains set earlier are kept). ``owner``/``group``: the
    spool for the two-user setup (:func:`make_spool`). ``node_hooks``: print the Prolog/Epilog lines too.
    Raises ValueError naming the field on bad input, OSError when a copy fails."""
    if not dest or not os.path.isabs(dest):
        raise ValueError(f"DEST: must be an absolute path (got {dest!r})")
    for field, value in (("--spool", spool), ("--slurm-conf", slurm_conf), ("--log", log)):
        if value and not os.path.isabs(value):
            raise ValueError(f"{field}: must be an absolute path (got {value!r})")
        if any(c in value for c in "\n\r"):
            raise ValueError(f"{field}: must not contain line breaks (got {value!r})")
    for k, program in (chain or {}).items():  # every chain checked before anything is written
        if program:
            _check_program(chain_context(k), program, os.path.join(dest, J.SHIM_NAME))
        else:
            chain_context(k)
    here = os.path.dirname(os.path.abspath(J.__file__))
    source = source or os.path.join(here, "share")
    shim_src = os.path.join(source, J.SHIM_NAME)
    if not os.path.isfile(shim_src):
        raise ValueError(f"source: no {J.SHIM_NAME} in {source} (a broken slurm-fair installation?)")
    os.makedirs(dest, mode=0o755, exist_ok=True)
    for src, name, mode in ((shim_src, J.SHIM_NAME, 0o755), (os.path.abspath(J.__file__), "jobrecord.py", 0o644)):
        with open(src, "rb") as f:
            data = f.read()
        tmp = os.path.join(dest, f".{name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, os.path.join(dest, name))
    lines = ["# written by slurm-fair hooks install; read by jobrecord.py on every hook call",
             f"spool={spool}"]
    if log:
        lines.append(f"log={log}")
    if slurm_conf:
        lines.append(f"slurm_conf={slurm_conf}")
    tmp = os.path.join(dest, f".{J.CONF_NAME}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(dest, J.CONF_NAME))
    _set_chain(dest, chain or {})
    make_spool(spool, owner, group)
    return slurm_conf_lines(dest, node_hooks)


def uninstall(dest: str, dry_run: bool = False) -> str:
    """Remove what :func:`install` put in ``dest`` (the shim, ``jobrecord.py``, hooks.conf, the chain links, the
    bytecode cache; the folder itself when that leaves it empty; the spool is kept: it holds job records).
    Returns the slurm.conf lines that put the site's own hooks back (a chained program) or mark the key for
    removal; ``dry_run``: only that, nothing removed. Raises ValueError when ``dest`` holds no slurm-fair hook."""
    if not dest or not os.path.isabs(dest):
        raise ValueError(f"DEST: must be an absolute path (got {dest!r})")
    if not os.path.isfile(os.path.join(dest, J.SHIM_NAME)):
        raise ValueError(f"DEST: no {J.SHIM_NAME} in {dest} (got {dest!r})")
    links = chained(dest)
    out = []
    for key, context in J.SLURM_CONF_KEYS.items():
        out.append(f"{key}={links[context]}\n" if context in links else f"# {key}= (remove the line)\n")
    if dry_run:
        return "".join(out)
    folder = os.path.join(dest, CHAIN_DIR)
    for c in J.CONTEXTS:
        if os.path.lexists(os.path.join(folder, c)):
            os.unlink(os.path.join(folder, c))
    for name in (J.SHIM_NAME, "jobrecord.py", J.CONF_NAME):
        if os.path.lexists(os.path.join(dest, name)):
            os.unlink(os.path.join(dest, name))
    cache = os.path.join(dest, "__pycache__")
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            if name.startswith("jobrecord."):
                os.unlink(os.path.join(cache, name))
    for d in (folder, cache, dest):
        try:
            os.rmdir(d)
        except OSError:
            pass
    return "".join(out)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "install":  # install DEST [--spool DIR] [--slurm-conf PATH] [--log PATH] [--chain K=P]
        opts = {"--spool": J.DEFAULT_SPOOL, "--slurm-conf": "", "--log": "", "--owner": "", "--group": ""}
        chain: dict[str, str] = {}
        args = argv[1:]
        dest = None
        node_hooks = False
        while args:
            a = args.pop(0)
            if a == "--node-hooks":
                node_hooks = True
            elif a == "--chain" and args and "=" in args[0]:
                k, _, v = args.pop(0).partition("=")
                chain[k] = v
            elif a in opts and args:
                opts[a] = args.pop(0)
            elif dest is None and not a.startswith("-"):
                dest = a
            else:
                sys.stderr.write(f"error: {a}: unknown or incomplete argument\n")
                return 2
        try:
            sys.stdout.write(install(dest or "", opts["--spool"], opts["--slurm-conf"], opts["--log"], chain=chain,
                                     owner=opts["--owner"], group=opts["--group"], node_hooks=node_hooks))
        except ValueError as e:
            sys.stderr.write(f"error: {e}\n")
            return 2
        return 0
    sys.stderr.write("usage: hookinstall.py install DEST [--spool DIR] [--slurm-conf PATH] [--log PATH]"
                     " [--owner USER] [--group GROUP] [--node-hooks] [--chain KEY=PROGRAM]...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
