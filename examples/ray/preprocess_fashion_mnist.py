"""fashion_mnist_preprocess on Ray: ray.data maps the augmentation, kolo's cache format comes out.

  python examples/ray/preprocess_fashion_mnist.py --out fmnist-train.kcache          # local Ray
  python examples/ray/preprocess_fashion_mnist.py --address HOST:PORT --out ...     # a running cluster
  kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --cache fmnist-train.kcache

The same file as ``kolorun -np N fashion_mnist_preprocess --out ...`` with the
same options writes, byte for byte: the augmentation (fashion_mnist_augment.py)
reproduces augment.cc exactly, the spec (transform name, inputs fingerprint,
f32 [1, 28, 28]) is computed as preprocess.cc computes it, and the driver
writes the records in sample order as kolo's rank 0 does. So the C++ trainer
(--cache) and Python trainers (kolo.data_cache.Cache) read it alike, and a
cache either tool built is reused by the other.

Ray's part: sample indices are a ray.data dataset; map_batches augments
blocks of them in parallel tasks on the cluster (each worker reads the IDX
files once: every node needs --data, as every rank of the C++ tool does);
the driver streams the augmented blocks in order into kolo's CacheWriter.
"""
import argparse
import os
import sys
import time

import numpy as np
import ray

import fashion_mnist_augment as augment_module

try:
    from kolo.data_cache import Cache, CacheError, CacheSpec, CacheWriter, InputHash
except ImportError:  # not installed: the checkout's build (scripts/build.sh)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    os.environ.get("KOLO_BUILD_DIR", "build"), "python"))
    from kolo.data_cache import Cache, CacheError, CacheSpec, CacheWriter, InputHash


def parse_args():
    p = argparse.ArgumentParser(description="Builds fashion_mnist's augmented training cache with ray.data")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory with the gzipped IDX files")
    p.add_argument("--out", default="fashion_mnist_train.kcache", help="the cache file")
    p.add_argument("--augment", default="elastic", choices=augment_module.KINDS)
    p.add_argument("--copies", type=int, default=1, help="augmented variants of each image")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-shift", type=int, default=2)
    p.add_argument("--alpha", type=float, default=1.5)
    p.add_argument("--sigma", type=float, default=4.0)
    p.add_argument("--limit", type=int, default=0, help="only the first N training images")
    p.add_argument("--chunk", type=int, default=256, help="samples per ray.data batch")
    p.add_argument("--force", action="store_true", help="rebuild even if the cache is up to date")
    p.add_argument("--no-progress", action="store_true", help="no Ray Data progress bars")
    p.add_argument("--address", default=None, help="Ray cluster to use (default: RAY_ADDRESS, else a local one)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray (default: all)")
    a = p.parse_args()
    if a.copies < 1 or a.chunk < 1 or a.limit < 0:
        p.error("--copies and --chunk must be positive, --limit non-negative")
    return a


def hex_float(v):
    """fmt's "{:a}" (C's %a): shortest hex digits, e.g. 1.5 -> 0x1.8p+0, 4.0 -> 0x1p+2."""
    mantissa, exponent = float(v).hex().split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}"


def cache_spec(a, n):
    """preprocess.cc's CacheSpec: same fields, same fingerprint of the same inputs."""
    inputs = (InputHash().file(os.path.join(a.data, "train-images-idx3-ubyte.gz"))
              .file(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))
              .number(n).number(a.copies).number(a.seed).number(a.max_shift)
              .text(f"{hex_float(a.alpha)} {hex_float(a.sigma)}").value())
    return CacheSpec(num_samples=n * a.copies, transform=augment_module.transform_name(a.augment),
                     inputs=inputs, dtype="f32", shape=(1, 28, 28))


def augment_batch(batch, data, n, options):
    """Runs on the Ray workers: sample i is image i mod n augmented with
    randomness seeded by i (each copy of an image is another variant)."""
    images, labels = augment_module.read_train(data)
    index = batch["id"].astype(np.uint64)
    image = index % np.uint64(n)
    pixels = augment_module.augment(images[image], index, **options)
    return {"id": index, "image": pixels[:, None], "label": labels[image].astype(np.int64)}


def build(a, spec, n, writer):
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # blocks arrive in sample order
    ctx.enable_progress_bars = not a.no_progress
    options = dict(kind=a.augment, max_shift=a.max_shift, alpha=a.alpha, sigma=a.sigma, seed=a.seed)
    ds = ray.data.range(spec.num_samples).map_batches(
        augment_batch, batch_size=a.chunk, batch_format="numpy",
        fn_kwargs=dict(data=os.path.abspath(a.data), n=n, options=options))
    expected = 0
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for i, image, label in zip(batch["id"], batch["image"], batch["label"]):
            if int(i) != expected:  # preserve_order is what makes the file deterministic
                raise RuntimeError(f"ray.data delivered sample {int(i)} where {expected} was due")
            writer.append(image, label)
            expected += 1
    return writer.commit()


def main():
    a = parse_args()
    images, _ = augment_module.read_train(a.data)
    n = min(a.limit, len(images)) if a.limit else len(images)
    spec = cache_spec(a, n)
    if os.path.exists(a.out) and not a.force:
        try:  # as build_cache: a fresh cache is reused, a stale or damaged one rebuilt
            diff = Cache(a.out).spec.difference(spec)
            why = f"stale: {diff}" if diff else None
        except CacheError as e:
            why = str(e)
        if why is None:
            print(f"preprocess {a.out}: reusing the cache (up to date)", flush=True)
            return
        print(f"preprocess {a.out}: rebuilding ({why})", flush=True)
    # The writer first: a path it must not overwrite fails before Ray starts.
    with CacheWriter(a.out, spec) as writer:
        # The workers import the augmentation module: ship it with the job.
        ray.init(address=a.address, num_cpus=a.num_cpus, include_dashboard=False if a.address is None else None,
                 runtime_env={"py_modules": [augment_module]})
        start = time.time()
        try:
            size = build(a, spec, n, writer)
        finally:
            ray.shutdown()
    seconds = time.time() - start
    print(f"preprocess {a.out}: {spec.num_samples} samples, {size / 1e6:.1f} MB in {seconds:.1f} s "
          f"({spec.num_samples / seconds:.0f} samples/s) with ray.data", flush=True)


if __name__ == "__main__":
    main()
