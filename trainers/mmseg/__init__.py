"""The reference workload: SwinV2 + UPerNet on ADE20K with MMSegmentation 1.x.

``compat`` (every stack trap, one place) -> ``backbone`` (timm SwinV2 in mmseg's
registry) -> ``model`` (the mmseg config: model, optimizer, schedule) -> ``data``
(ADE20K pipeline or synthetic batches) -> ``trainer`` (``build`` for trainers.registry).
Nothing here is imported by ``campaign`` itself: the stack loads only in a job.
"""
