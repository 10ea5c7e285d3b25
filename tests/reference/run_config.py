"""The resolved run config that `driftless config` writes, read with the standard library
(PyYAML when present): train_parity.py (torch) and parity_band.py (no torch) share it."""


def parse_scalar(text):
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [parse_scalar(x) for x in inner.split(",")] if inner else []
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if t in ("true", "false"):
        return t == "true"
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


def read_config(path):
    """The resolved run config as nested dicts. `driftless config` writes block mappings of
    scalars and flow lists; PyYAML reads it when present, else this small reader."""
    text = open(path).read()
    try:
        import yaml

        # YAML 1.1 reads 1e-05 (no dot) as a string: numbers are taken as parse_scalar does.
        def numbers(x):
            if isinstance(x, dict):
                return {k: numbers(v) for k, v in x.items()}
            return parse_scalar(x) if isinstance(x, str) else x

        return numbers(yaml.safe_load(text))
    except ImportError:
        pass
    root, stack = {}, [(-1, None)]
    stack[0] = (-1, root)
    for line in text.splitlines():
        body = line.split(" #")[0].rstrip()
        if not body.strip() or body.lstrip().startswith("#") or body.lstrip().startswith("- "):
            continue
        indent = len(body) - len(body.lstrip())
        key, _, value = body.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if value.strip() in ("", "{}"):
            parent[key] = {}
            stack.append((indent, parent[key]))
        else:
            parent[key] = parse_scalar(value)
    return root
