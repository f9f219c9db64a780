"""Servers the remote-cache tests and bench/bench_build.py start on 127.0.0.1: a free
port, waiting for a server to listen, and Debian's nginx serving WebDAV PUT/GET (a
Bazel HTTP cache)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, tries: int, pause: float) -> bool:
    """True once something listens on `port`; False if `proc` exits or `tries` run out."""
    for _ in range(tries):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            if proc.poll() is not None:
                return False
            time.sleep(pause)
    return False


def start_webdav_nginx(root: Path, locations: dict[str, str | None]) -> tuple[subprocess.Popen, str, Path]:
    """nginx under `root` with one WebDAV location per name (a value: the
    Authorization header it requires, None for none). Returns (process,
    http://127.0.0.1:PORT, the folder the locations store in); raises RuntimeError
    with nginx's stderr when it does not start."""
    www = root / "www"
    for d in ["tmp", "logs", *(f"www/{name}" for name in locations)]:
        (root / d).mkdir(parents=True, exist_ok=True)
    port = free_port()
    temp = "".join(f"  {k}_temp_path {root / 'tmp' / k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    blocks = "".join(f"""
    location /{name}/ {{
{f'      if ($http_authorization != "{auth}") {{ return 401; }}' + chr(10) if auth else ''}      alias {www}/{name}/;
      dav_methods PUT;
      create_full_put_path on;
      client_max_body_size 64m;
    }}""" for name, auth in locations.items())
    (root / "nginx.conf").write_text(f"""
daemon off;
master_process off;
worker_processes 1;
error_log {root / 'logs' / 'error.log'};
pid {root / 'nginx.pid'};
events {{ worker_connections 64; }}
http {{
  access_log {root / 'logs' / 'access.log'};
{temp}
  server {{
    listen 127.0.0.1:{port};{blocks}
  }}
}}
""")
    proc = subprocess.Popen([NGINX, "-c", str(root / "nginx.conf"), "-p", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not wait_for_port(port, proc, 100, 0.05):
        proc.kill()
        raise RuntimeError(f"nginx did not start: {proc.stderr.read().decode()}")
    return proc, f"http://127.0.0.1:{port}", www
