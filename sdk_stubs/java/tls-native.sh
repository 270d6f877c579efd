#!/bin/sh
# Makes grpc-java TLS work with Debian 12's jars. Debian's netty has its JDK ALPN
# support patched out, so grpc-netty needs OpenSSL through netty-tcnative
# (libnetty-tcnative-java + libnetty-tcnative-jni), whose JNI library Debian installs
# under a name netty does not look for. This copies it to DIR/libnetty_tcnative.so:
#   sdk_stubs/java/tls-native.sh build/jni
#   java -Djava.library.path=build/jni -cp "build:$(sdk_stubs/java/classpath.sh)" ...
# (Jars from Maven Central, e.g. grpc-netty-shaded, need none of this.)
set -e
DIR="${1:?usage: tls-native.sh DIR}"
SO=/usr/lib/x86_64-linux-gnu/jni/libnetty-tcnative.so
[ -f "$SO" ] || SO="$(ls /usr/lib/*/jni/libnetty-tcnative.so 2>/dev/null | head -n1)"
[ -f "$SO" ] || { echo "tls-native.sh: libnetty-tcnative-jni is not installed" >&2; exit 1; }
mkdir -p "$DIR"
cp "$SO" "$DIR/libnetty_tcnative.so"  # a copy: netty-tcnative checks the real file name
