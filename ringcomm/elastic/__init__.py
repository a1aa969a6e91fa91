"""Elastic jobs: ranks come and go while the job runs, as in Horovod's elastic mode.

``ringcomm-run --host-discovery-script SCRIPT`` (launch.py) runs a driver (driver.py) that polls
the script (discovery.py) for ``host:slots`` lines, starts one worker per assigned slot, and,
when the hosts change or a worker fails, has the surviving workers meet again in a new
*generation*. ``ringcomm.init()`` in a worker (worker.py) takes its rank from the driver, and
``ringcomm.torch.elastic`` (Horovod's ``hvd.elastic``) resets training state around it.

How the driver and its workers talk: through the launcher's store, whose connections prove the
job's secret like every other. protocol.py names the keys; each generation ``g`` has its own:

    elastic/<g>/slot/<host>:<slot>   the driver's answer to a worker: its rank, size, ... in g
                                     (or that it was removed from the job)
    elastic/<g>/ready/<host>:<slot>  a worker left g to meet again (Horovod's "ready")
    elastic/<g>/job/...              the rendezvous of g's communicators, and nothing else
    elastic/notices, elastic/notice/<n>
                                     host-change notices: a counter, and what each one says

A generation's data links prove a secret derived from the job's secret and the generation, so
a worker still holding an earlier generation's links can never connect to (or be accepted by)
a later one's.
"""
