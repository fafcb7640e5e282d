package threadrpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Service is the service's full name, Method the full name of its method,
// as gRPC and an outbound policy's "grpc://host:port/<Service>/" prefix
// name them.
const (
	Service = "sessionwire.examples.Thread"
	Method  = "/" + Service + "/Thread"
)

// Server answers Thread: the thread of the session in ctx, or whatever the
// service decides it saw.
type Server interface {
	Thread(ctx context.Context) (string, error)
}

// handlerType is what grpc.ServiceDesc checks a registered server against.
type handlerType interface{ Server }

var desc = grpc.ServiceDesc{
	ServiceName: Service,
	HandlerType: (*handlerType)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Thread",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, _ any) (any, error) {
				thread, err := srv.(Server).Thread(ctx)
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(thread), nil
			}
			if interceptor == nil {
				return call(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: Method}, call)
		},
	}},
	Metadata: "examples/internal/threadrpc/threadrpc.go",
}

// Register registers srv on s.
func Register(s grpc.ServiceRegistrar, srv Server) { s.RegisterService(&desc, srv) }

// Call calls Thread over cc and returns the thread the service answered.
func Call(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, Method, &emptypb.Empty{}, out, opts...); err != nil {
		return "", fmt.Errorf("call %s: %w", Method, err)
	}
	return out.GetValue(), nil
}
