"""`gpuop-sim` console script."""


def main() -> None:
    raise SystemExit("gpuop-sim: under construction")
