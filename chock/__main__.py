from chock.entry import main

main()
