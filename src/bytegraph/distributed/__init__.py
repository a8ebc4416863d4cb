"""torch.distributed support.

* :mod:`.ddp`: under ``DistributedDataParallel``, captured graphs are cut at
  DDP's gradient buckets so each bucket's all-reduce overlaps the rest of
  backward; :mod:`.ddp_module`: ``bytegraph.compile(DDP(model))``.
* :mod:`.graph_split`: cutting one graph into consecutive, separately
  compiled pieces.
* :mod:`.collectives`: functional collectives, in-place ``dist.all_reduce``
  and friends, ``dist.get_rank()``/``get_world_size()`` inside traced code.
* :mod:`.subclasses`: tensor subclasses with ``__tensor_flatten__`` (DTensor)
  as graph inputs.
* :mod:`.hooks`: module hooks that must run natively (FSDP2's), around a
  traced ``forward``.
"""
