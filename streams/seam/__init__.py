"""Every faust, mode, aiokafka and rocksdict behaviour the worker replaces, one file each.

The worker keeps faust for the consumer group, assignment, fetching, flow control, commits, the
tables, their changelogs and recovery. Where one of faust's (or its libraries') behaviours cost too
much or lost records, it is replaced here, below the libraries' public surface, and nowhere else.
Each file opens with what the library does, why Guardian differs (the measured reason), the
upstream issue where there is one, and the tests that prove the replacement. Every private part a
file relies on is reached through :func:`streams.seam.parts.part_of` and verified when the worker
starts (:func:`streams.seam.check.check`, :func:`streams.seam.membership.check`) on the versions
pinned in ``pyproject.toml``: a missing one stops the worker naming the installed versions.

=========================  ==========================  ===============================================
replaced                   file                        in one line
=========================  ==========================  ===============================================
per-message hand-off       ``batch_conductor.py``      topics of the pipeline go to its inbox in
                                                       batches, not through Event/Stream per message
a task per hand-off        ``eager_handoff.py``        the fetcher's hand-off runs eagerly; a task
                                                       only when it blocks
fetch wait and size        ``short_fetch.py``          an empty fetch held 100 ms (not 1.5 s); 64 KiB
                                                       or 10 ms gathered while records flow
read offsets               ``read_offsets.py``         every record of the pipeline's topics handed
                                                       over; the pipeline checks the order itself
gap acks                   ``log_gaps.py``             only offsets missing from the log count as
                                                       acked, never the record in hand
seeks                      ``seeks.py``                the seek after recovery keeps the place read
                                                       meanwhile; no commit: from the beginning
acks of a batch            ``batch_acks.py``           a delivered batch acked at once (faust's own
                                                       bookkeeping, once per batch)
table writes, changelogs   ``table_writes.py``         batched RocksDB and changelog writes through
                                                       the partition databases; zstd changelogs
RocksDB options            ``rocksdb_memory.py``       one block cache, one memtable budget for
                                                       every partition database
recovery per assignment    ``recovery.py``             "recovered" means for the current assignment,
                                                       not the first one
group membership           ``membership.py``           static members, leaving for good (LeaveGroup
                                                       v3), rejoining after a held-back error
terminal spinner           ``spinner.py``              no spinner off a terminal; the root log level
                                                       back from DEBUG
a stop without an end      ``stop_deadline.py``        a stop that waits on an absent broker ends
                                                       after 20 s, with a line saying why
=========================  ==========================  ===============================================

Not replacements: ``transport.py`` puts the replacements together (``SeamApp``, ``EagerTransport``,
``EagerConsumer``), ``reads.py`` reads private state (committed offsets, the producer, fetch
states; the producer buffer's depth), ``parts.py`` and ``check.py`` reach and verify the private
parts. Elsewhere, not replacing faust but working around it: ``streams/stalls.py`` (a partition
assigned and never fetched, faust-streaming #629) and the flush and commit protocol of
``streams/commit_batch.py`` (faust's per-message acks and its revocation's flush).
"""
