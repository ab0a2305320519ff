"""``python manage.py quickstart``: everything ``make run`` does, on the embedded defaults.

Steps: migrate; create the demo admin (password generated once, kept in COSTCENTER_HOME and
printed each time); load the example catalog and a month of demo usage; then run the web server, a Celery worker and
Celery beat as child processes until Ctrl-C, and stop them all (and the embedded Postgres).
"""

from __future__ import annotations

import io
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from costcenter.costing import recompute

EXAMPLE_CATALOG = Path(settings.BASE_DIR) / "examples" / "catalog.yaml"
STOP_GRACE_SECONDS = 15


class Command(BaseCommand):
    help = "Migrate, create the demo admin, load the example catalog, and serve web + worker + beat."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default=os.environ.get("ADDR", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-serve", action="store_true", help="prepare the database and exit")
        parser.add_argument("--no-demo", action="store_true", help="skip the simulated demo usage")

    def handle(self, *args, addr: str, port: int, no_serve: bool, no_demo: bool, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        username, password = self._demo_admin()
        call_command("load_catalog", str(EXAMPLE_CATALOG), stdout=self.stdout)
        if not no_demo:
            self.stdout.write(
                "loading demo usage (a month of simulated traffic; re-runs add only new hours) …"
            )
            started = time.monotonic()
            demo_out = io.StringIO()
            call_command("demo", stdout=demo_out)
            total = [line for line in demo_out.getvalue().splitlines() if line.startswith("total")]
            self.stdout.write(f"{total[-1] if total else 'demo loaded'} ({time.monotonic() - started:.0f}s)")
        started = time.monotonic()
        hours = recompute()
        self.stdout.write(f"costs computed for {hours:,} hour(s) ({time.monotonic() - started:.0f}s)")
        from costcenter.reports.demo import subscribe_and_plan

        if subscribe_and_plan(get_user_model().objects.get(username=username)):
            where = settings.EMAIL_HOST or getattr(settings, "EMAIL_FILE_PATH", "")
            self.stdout.write(
                f"last week's report for {username} goes out on the beat's next tick (to {where})"
            )
        if no_serve:
            return
        url = f"http://{addr}:{port}/"
        self.stdout.write(self.style.SUCCESS(f"\n  CostCenter: {url}\n  log in as {username} / {password}\n"))
        self.stdout.write("  web, worker and beat are starting; press Ctrl-C to stop them all\n")
        self._serve(addr, port)

    def _demo_admin(self) -> tuple[str, str]:
        """The demo superuser; its generated password is kept (0600) so every run can print it."""
        username = "admin"
        secret_file = settings.COSTCENTER_HOME / "demo-admin-password"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser(username, "admin@localhost", password)
            secret_file.parent.mkdir(parents=True, exist_ok=True)
            secret_file.write_text(password)
            secret_file.chmod(0o600)
            return username, password
        password = secret_file.read_text().strip() if secret_file.exists() else ""
        if not password or not user.check_password(password):
            return username, "(the password you set)"
        return username, password

    def _serve(self, addr: str, port: int) -> None:
        python = sys.executable
        commands = {
            "web": [python, "manage.py", "runserver", f"{addr}:{port}", "--noreload"],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "costcenter",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
            ],
            "beat": [python, "-m", "celery", "-A", "costcenter", "beat", "--loglevel", "INFO"],
        }
        children: dict[str, subprocess.Popen] = {}
        stopping = False

        def request_stop(signum, frame):
            nonlocal stopping
            stopping = True

        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for name, command in commands.items():
                # A session of their own: a Ctrl-C reaches only us, and we pass on exactly one SIGINT.
                children[name] = subprocess.Popen(command, cwd=settings.BASE_DIR, start_new_session=True)  # noqa: S603
            while not stopping:
                exited = {
                    name: child.returncode for name, child in children.items() if child.poll() is not None
                }
                if exited:
                    # One part died: stop the rest rather than serve half an application.
                    raise CommandError(f"stopped because {', '.join(exited)} exited (status {exited})")
                time.sleep(0.5)
        finally:
            self._stop(children)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stdout.write("stopped web, worker and beat")

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        # SIGINT, as Ctrl-C would send: each child shuts down cleanly and runs its exit handlers.
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
