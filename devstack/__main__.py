"""`make run` (`python -m devstack`): see devstack/run.py."""

from .run import main

if __name__ == "__main__":
    main()
