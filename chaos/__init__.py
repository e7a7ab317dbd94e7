"""``python -m chaos`` (``make chaos``): the live engine under seeded faults, checked against replay.

A run starts a broker of its own, keeps a group of workers at its size while a seeded schedule
kills, stops and terminates them and stops the broker, plays simulated fleets in waves meanwhile,
then drains, exports, replays and compares (:mod:`chaos.verify`). Its parts:

- :mod:`chaos.schedule`: the faults of a seed (pure: the same seed, the same schedule);
- :mod:`chaos.cluster`: the broker and the workers' processes, kept at their count;
- :mod:`chaos.progress`: the group's commits, polled, and the pause after each fault;
- :mod:`chaos.verify`: live outputs against ``guardian replay`` of the same input records;
- :mod:`chaos.run`: one run, start to verdict; :mod:`chaos.cli`: its command line.
"""
