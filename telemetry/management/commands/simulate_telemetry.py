import time

from django.core.management.base import BaseCommand

from telemetry import synthetic_load


class Command(BaseCommand):
    help = "Play the simulated fleet's telemetry: one sample per GPU every interval, from its claims."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument(
            "--ticks", type=int, default=0, help="stop after this many (0 = run until stopped)"
        )

    def handle(self, *args, interval: float, ticks: int, **options):
        for done, (started, count) in enumerate(synthetic_load.play(interval), start=1):
            self.stdout.write(f"tick {done}: {count} samples in {time.time() - started:.3f}s")
            if done == ticks:
                return
