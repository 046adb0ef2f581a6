import time

from django.core.management.base import BaseCommand

from telemetry import synthetic_load

RELOAD_EVERY_S = 10  # claims come and go: re-read the layout now and then


class Command(BaseCommand):
    help = "Play the simulated fleet's telemetry: one sample per GPU every interval, from its claims."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument(
            "--ticks", type=int, default=0, help="stop after this many (0 = run until stopped)"
        )

    def handle(self, *args, interval: float, ticks: int, **options):
        done, loaded_at, gpus = 0, 0.0, []
        while not ticks or done < ticks:
            started = time.time()
            if started - loaded_at > RELOAD_EVERY_S:
                gpus, loaded_at = synthetic_load.layout(), started
            count = synthetic_load.tick(started, gpus)
            done += 1
            self.stdout.write(f"tick {done}: {count} samples in {time.time() - started:.3f}s")
            time.sleep(max(0.0, interval - (time.time() - started)))
