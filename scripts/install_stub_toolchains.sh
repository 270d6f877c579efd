#!/usr/bin/env bash
# Installs what the generated client stubs need to be regenerated, built and run:
#   Go    golang-go 1.19, grpc-go 1.33, protobuf-go 1.28, protoc-gen-go(-grpc)  (Debian)
#   Java  OpenJDK 17, grpc-java 1.41 jars + grpc_java_plugin, protobuf-java 3.21 (Debian)
#   protoc 3.21 (Debian; the Java plugin runs it), openssl (the TLS test's certificate)
#   chromium (Debian; the episode viewer's browser test)
#   Node  @grpc/grpc-js, ts-proto, typescript (npm, pinned by the lockfiles under
#         sdk_stubs/typescript and examples/clients/typescript)
# Idempotent and quiet: installed packages are skipped, npm trees are reused
# while their lockfile is unchanged. Needs root (or sudo) for apt-get.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

APT_PACKAGES=(
  protobuf-compiler openssl
  golang-go golang-google-grpc-dev golang-google-protobuf-dev protoc-gen-go protoc-gen-go-grpc
  # grpc-go 1.33 marshals through github.com/golang/protobuf; the 1.3 line Debian would
  # pick by default panics on protoc-gen-go 1.28 messages, 1.5 wraps the new API.
  golang-github-golang-protobuf-1-5-dev
  default-jdk-headless libgrpc-java protobuf-compiler-grpc-java-plugin libprotobuf-java
  libnetty-java libperfmark-java libgoogle-gson-java libgeronimo-annotation-1.3-spec-java
  liberror-prone-java libnetty-tcnative-java libnetty-tcnative-jni
  # Not a stub toolchain: the episode viewer's test drives headless Chromium.
  chromium
)

# Node itself normally comes with the machine (buf is installed through npm); Debian's
# will do where it does not.
command -v npm >/dev/null || APT_PACKAGES+=(nodejs npm)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  echo "install_stub_toolchains: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# npm ci only when the lockfile changed since the last install.
npm_ci() {
  local dir="$ROOT/$1" stamp="$ROOT/$1/node_modules/.installed"
  if [[ ! -f "$stamp" || "$dir/package-lock.json" -nt "$stamp" || "$dir/package.json" -nt "$stamp" ]]; then
    echo "install_stub_toolchains: npm ci in $1"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$stamp"
  fi
}
npm_ci sdk_stubs/typescript
npm_ci examples/clients/typescript
