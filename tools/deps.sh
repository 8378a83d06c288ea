#!/bin/sh
# deps.sh: install the Debian packages the project needs (idempotent).
set -e
PKGS="build-essential pkg-config protobuf-c-compiler libprotobuf-c-dev libzstd-dev zlib1g-dev
libopenblas-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo libonnx-dev
python3-onnx python3-numpy python3-torch python3-torchvision bats mandoc
dataset-fashion-mnist
zstd clang-14 libclang-rt-14-dev libclblast-dev
openmpi-bin libopenmpi-dev
libpng-dev libjpeg-dev python3-pil"
missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all packages installed"
	exit 0
fi
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "deps: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
