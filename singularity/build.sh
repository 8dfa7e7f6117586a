#!/usr/bin/env bash
# Build campaign's training image: the Docker image of singularity/Dockerfile, then a
# SIF from it with apptainer or singularity (whichever is on PATH), then
# <image>.sha256 beside the SIF (its digest, then the image's torch version, CUDA
# version and arch list). See singularity/README.md.
#
# usage: singularity/build.sh [options]
#   -o, --output PATH     the SIF to write (default: build/campaign-<version>.sif)
#   --archive             docker save the image to <output without .sif>.tar and
#                         build the SIF from that archive, not from the Docker daemon
#   --from-archive FILE   skip Docker: build the SIF from a `docker save` tarball
#                         (e.g. copied from a workstation to a cluster login node)
#   --docker-only         build the Docker image (and the archive with --archive), no SIF
#   --v100                the CUDA 12.6 variant that also runs on V100 (sm_70)
#   --cuda-arch LIST      TORCH_CUDA_ARCH_LIST of the mmcv build (default "8.0;9.0")
#   --force               overwrite an existing SIF
#   -h, --help            this text
# Environment: SIF_BUILD_FLAGS, extra flags for `apptainer build` (default --fakeroot
# when not root); DOCKER_BUILD_FLAGS, extra flags for `docker build`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

die() {
    printf 'build.sh: error: %s\n' "$*" >&2
    exit 2
}

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

output=""
archive_mode=0
from_archive=""
docker_only=0
force=0
base_image=""
cuda_version=""
cuda_arch=""
while (($#)); do
    case $1 in
        -o | --output)
            (($# >= 2)) || die "$1 needs a path"
            output=$2
            shift 2
            ;;
        --archive)
            archive_mode=1
            shift
            ;;
        --from-archive)
            (($# >= 2)) || die "$1 needs the path of a docker save tarball"
            from_archive=$2
            shift 2
            ;;
        --docker-only)
            docker_only=1
            shift
            ;;
        --v100)
            base_image=pytorch/pytorch:2.14.1-cuda12.6-cudnn9-devel
            cuda_version=12.6
            cuda_arch=${cuda_arch:-7.0;8.0;9.0}
            shift
            ;;
        --cuda-arch)
            (($# >= 2)) || die "$1 needs a list such as '8.0;9.0'"
            cuda_arch=$2
            shift 2
            ;;
        --force)
            force=1
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            die "unknown option '$1'; see $0 --help"
            ;;
    esac
done

version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$repo/pyproject.toml" | head -n 1)
[[ -n $version ]] || die "cannot read the project version from $repo/pyproject.toml"
tag="campaign:$version"
def_from=$(sed -n 's/^From:[[:space:]]*//p' "$here/campaign.def" | head -n 1)
[[ $def_from == "$tag" ]] \
    || die "singularity/campaign.def builds From: $def_from but pyproject.toml is at $version; set its From: line and labels to $version"

# Prints the lines build.sh appends to <image>.sha256 (campaign/launch/arch.py reads them).
torch_probe='import torch; print("# torch_version", torch.__version__); print("# cuda_version", torch.version.cuda or "none"); print("# cuda_arch_list", " ".join(torch.cuda.get_arch_list()) if torch.version.cuda else "")'
output=${output:-$repo/build/campaign-$version.sif}
[[ $output == *.sif ]] || die "the output '$output' must end in .sif"
archive=${output%.sif}.tar
if [[ -n $from_archive ]]; then
    ((docker_only == 0)) || die "--from-archive and --docker-only exclude each other"
    [[ -f $from_archive ]] || die "docker archive '$from_archive' not found; make it with: singularity/build.sh --archive --docker-only"
    archive_mode=1
    archive=$from_archive
fi

# Check every tool before the long Docker build.
runtime=""
if ((docker_only == 0)); then
    for candidate in apptainer singularity; do
        if command -v "$candidate" >/dev/null 2>&1; then
            runtime=$candidate
            break
        fi
    done
    [[ -n $runtime ]] || die "neither apptainer nor singularity is on PATH; install Apptainer or load its module (module load apptainer), or run with --archive --docker-only here and --from-archive where Apptainer is"
    if [[ -e $output ]] && ((force == 0)); then
        die "$output exists; pass --force to overwrite it"
    fi
fi
if [[ -z $from_archive ]]; then
    command -v docker >/dev/null 2>&1 \
        || die "docker not found on PATH; install Docker, or build the SIF from a saved image with --from-archive FILE"
    docker info >/dev/null 2>&1 \
        || die "docker cannot reach its daemon; start it (systemctl start docker) or add yourself to the docker group"
fi
mkdir -p "$(dirname "$output")"

if [[ -z $from_archive ]]; then
    build_args=(--build-arg "CAMPAIGN_VERSION=$version")
    [[ -z $base_image ]] || build_args+=(--build-arg "BASE_IMAGE=$base_image")
    [[ -z $cuda_version ]] || build_args+=(--build-arg "CUDA_VERSION=$cuda_version")
    [[ -z $cuda_arch ]] || build_args+=(--build-arg "TORCH_CUDA_ARCH_LIST=$cuda_arch")
    read -r -a docker_flags <<<"${DOCKER_BUILD_FLAGS:-}"
    printf 'build.sh: docker build -t %s\n' "$tag"
    DOCKER_BUILDKIT=1 docker build ${docker_flags[@]+"${docker_flags[@]}"} "${build_args[@]}" \
        -f "$here/Dockerfile" -t "$tag" "$repo"
    if ((archive_mode)); then
        printf 'build.sh: docker save %s -> %s\n' "$tag" "$archive"
        docker save -o "$archive" "$tag"
    fi
fi
if ((docker_only)); then
    printf 'build.sh: built %s (no SIF: --docker-only)\n' "$tag"
    exit 0
fi

def=$here/campaign.def
if ((archive_mode)); then
    # The same definition, bootstrapped from the tarball instead of the daemon.
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    def=$tmp/campaign.def
    archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
    {
        printf 'Bootstrap: docker-archive\nFrom: %s\n' "$archive"
        sed '/^Bootstrap:/d; /^From:/d' "$here/campaign.def"
    } >"$def"
fi

sif_flags=()
if [[ -n ${SIF_BUILD_FLAGS:-} ]]; then
    read -r -a sif_flags <<<"$SIF_BUILD_FLAGS"
elif ((EUID != 0)); then
    sif_flags=(--fakeroot)
fi
((force == 0)) || sif_flags+=(--force)
printf 'build.sh: %s build %s\n' "$runtime" "$output"
"$runtime" build ${sif_flags[@]+"${sif_flags[@]}"} "$output" "$def"

if command -v sha256sum >/dev/null 2>&1; then
    sum=(sha256sum)
else
    sum=(shasum -a 256)
fi
(cd "$(dirname "$output")" && "${sum[@]}" "$(basename "$output")") >"$output.sha256"
read -r digest _ <"$output.sha256"
# The image's torch build, after its digest: campaign's launch reads it from here (no
# runtime needed) to refuse GPUs that build has no kernels for (campaign/launch/arch.py).
# No GPU is needed to ask torch its arch list.
record=$("$runtime" exec "$output" python -c "$torch_probe") \
    || die "cannot ask $output for its torch build ($runtime exec ... python failed); check the image with: $runtime test $output"
printf '%s\n' "$record" >>"$output.sha256"
printf 'sha256 %s  %s\n' "$digest" "$output"
printf 'use it with: campaign launch container=%s container.image=%s\n' "$runtime" "$output"
